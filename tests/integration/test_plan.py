"""bramble plan: per-GPU memory from the published rules (docs/planning.md) and
which ready nodes fit it; usage errors exit 2 and name the flag."""

import json
import os
import subprocess

import pytest

from conftest import CLI_TIMEOUT, Cluster, sanitizer_lines, wait_for

GIB = 1 << 30
OVERHEAD = GIB  # the documented fixed allowance per GPU


def run_plan(tmp_path, *args, credential=None):
    """`bramble plan ARGS` with no credential at all (unless given): (rc, out, err)."""
    env = dict(os.environ)
    env.pop("BRAMBLE_CREDENTIAL", None)
    env["HOME"] = str(tmp_path)  # no ~/.config/bramble/credential either
    argv = [Cluster.bin("bramble")]
    if credential:
        argv += ["--credential", str(credential)]
    argv += ["plan", *[str(a) for a in args]]
    r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=CLI_TIMEOUT)
    assert not sanitizer_lines(r.stderr), r.stderr
    return r.returncode, r.stdout, r.stderr


def plan_json(tmp_path, *args, **kw):
    rc, out, err = run_plan(tmp_path, *args, "--json", **kw)
    assert rc == 0, f"plan {args} exited {rc}: {err}"
    return json.loads(out)


def by_name(plan):
    return {s["name"]: s for s in plan["strategies"]}


def states(s):
    """weights + gradients + optimizer states of one strategy (bytes per GPU)."""
    g = s["per_gpu"]
    return g["weights"] + g["gradients"] + g["optimizer"]


def test_inference_bf16_weights_are_two_bytes_per_param(tmp_path):
    plan = plan_json(tmp_path, "--params", "8B", "--mode", "inference",
                     "--dtype", "bf16")
    assert plan["params"] == 8_000_000_000
    assert (plan["mode"], plan["dtype"], plan["gpus"], plan["zero"]) == \
        ("inference", "bf16", 1, 0)
    [s] = plan["strategies"]
    g = s["per_gpu"]
    assert g["weights"] == 16e9
    assert g["gradients"] == g["optimizer"] == g["activations"] == g["kv_cache"] == 0
    assert g["overhead"] == OVERHEAD
    assert g["total"] == sum(v for k, v in g.items() if k != "total")
    assert all(isinstance(v, int) for v in g.values()), g
    assert s["fits"] == []


@pytest.mark.parametrize("dtype,bytes_per_param", [
    ("fp32", 4), ("fp16", 2), ("int8", 1), ("int4", 0.5)])
def test_inference_dtypes(tmp_path, dtype, bytes_per_param):
    [s] = plan_json(tmp_path, "--params", "70B", "--mode", "inference",
                    "--dtype", dtype)["strategies"]
    assert s["per_gpu"]["weights"] == 70e9 * bytes_per_param


@pytest.mark.parametrize("params", ["8B", "70B"])
def test_full_training_is_16_bytes_per_param_divided_by_zero_stage(tmp_path, params):
    p = {"8B": 8e9, "70B": 70e9}[params]
    one = by_name(plan_json(tmp_path, "--params", params, "--mode", "full"))
    assert set(one) == {"ddp", "zero-1", "zero-2", "zero-3"}
    for s in one.values():  # on one GPU every stage is plain DDP
        assert states(s) == 16 * p
        assert s["per_gpu"]["weights"] == 2 * p
        assert s["per_gpu"]["gradients"] == 2 * p
        assert s["per_gpu"]["optimizer"] == 12 * p
    eight = by_name(plan_json(tmp_path, "--params", params, "--mode", "full",
                              "--gpus", 8))
    assert states(eight["ddp"]) == 16 * p
    assert states(eight["zero-1"]) == (2 + 2 + 12 / 8) * p
    assert states(eight["zero-2"]) == (2 + (2 + 12) / 8) * p
    assert states(eight["zero-3"]) == (16 / 8) * p
    for s in eight.values():
        assert s["per_gpu"]["total"] == states(s) + OVERHEAD


def test_full_training_fp32_is_also_16_bytes_per_param(tmp_path):
    [s, *_] = plan_json(tmp_path, "--params", "8B", "--mode", "full",
                        "--dtype", "fp32")["strategies"]
    g = s["per_gpu"]
    assert (g["weights"], g["gradients"], g["optimizer"]) == (32e9, 32e9, 64e9)


def test_lora_and_qlora(tmp_path):
    # LoRA: frozen bf16 base (2 B/param) + adapters of 1% of params at 16 B/param.
    [s] = plan_json(tmp_path, "--params", "8B", "--mode", "lora")["strategies"]
    g = s["per_gpu"]
    assert (s["name"], g["weights"], g["gradients"], g["optimizer"]) == \
        ("lora", 16e9 + 2 * 80e6, 2 * 80e6, 12 * 80e6)
    # QLoRA: NF4 base with double-quantized constants, 4.126953125 bits per param.
    [s] = plan_json(tmp_path, "--params", "8B", "--mode", "qlora")["strategies"]
    g = s["per_gpu"]
    assert g["weights"] == 8e9 * 4.126953125 / 8 + 2 * 80e6
    assert (g["gradients"], g["optimizer"]) == (2 * 80e6, 12 * 80e6)


def test_kv_cache_and_activations(tmp_path):
    # KV cache: 2 x layers x hidden x seq_len x batch x 2 bytes (bf16).
    plan = plan_json(tmp_path, "--params", "8B", "--mode", "inference",
                     "--seq-len", 4096, "--batch", 1, "--layers", 32, "--hidden", 4096)
    assert plan["strategies"][0]["per_gpu"]["kv_cache"] == 2 * 32 * 4096 * 4096 * 2
    # derived shape: layers = round(cbrt(P / (12 * 128^2))) = 34, hidden = 128 x 34
    plan = plan_json(tmp_path, "--params", "8B", "--mode", "full", "--seq-len", 2048,
                     "--batch", 1)
    assert (plan["layers"], plan["hidden"]) == (34, 4352)
    for s in plan["strategies"]:  # 34 x s x b x h x L bytes, not sharded by ZeRO
        assert s["per_gpu"]["activations"] == 34 * 2048 * 1 * 4352 * 34
        assert s["per_gpu"]["kv_cache"] == 0


def test_no_cluster_skips_fitting(tmp_path):
    rc, out, err = run_plan(tmp_path, "--params", "8B", "--mode", "inference")
    assert rc == 0, err
    assert "(no cluster: skipped fitting)" in out
    assert "inference" in out and "14.9GiB" in out


@pytest.mark.parametrize("args,flag", [
    (["--params", "lots", "--mode", "full"], "--params"),
    (["--params", "0", "--mode", "full"], "--params"),
    (["--mode", "full"], "--params"),
    (["--params", "8B", "--mode", "pretrain"], "--mode"),
    (["--params", "8B"], "--mode"),
    (["--params", "8B", "--mode", "full", "--dtype", "fp8"], "--dtype"),
    (["--params", "8B", "--mode", "full", "--dtype", "int4"], "--dtype"),
    (["--params", "8B", "--mode", "full", "--zero", "4"], "--zero"),
    (["--params", "8B", "--mode", "full", "--zero", "-1"], "--zero"),
    (["--params", "8B", "--mode", "inference", "--zero", "3"], "--zero"),
    (["--params", "8B", "--mode", "full", "--gpus", "0"], "--gpus"),
    (["--params", "8B", "--mode", "full", "--seq-len", "2048"], "--seq-len"),
    (["--params", "8B", "--mode", "full", "--batch", "2"], "--batch"),
    (["--params", "8B", "--mode", "full", "--frobnicate"], "--frobnicate"),
    (["--params", "8B", "--mode", "full", "--seq-len", "16000000", "--batch", "1000000",
      "--layers", "100000", "--hidden", "1000000"], "--seq-len"),  # over 4 EiB
])
def test_usage_errors_exit_2_naming_the_flag(tmp_path, args, flag):
    rc, out, err = run_plan(tmp_path, *args)
    assert rc == 2, (rc, out, err)
    assert flag in err, err
    assert out == ""


def test_fitting_on_declared_gpus(make_cluster):
    c = make_cluster()
    tok = c.token(uses=2)
    c.start_agent("small", token=tok, extra=["--gpus", "RTX 4090:24GiB"])
    c.start_agent("big", token=tok, extra=["--gpus", "A100:80GiB"])
    c.wait_ready("small", "big")

    plan = c.cli_json("plan", "--params", "8B", "--mode", "inference",
                      "--dtype", "bf16")
    assert plan["fits_checked"] is True
    assert sorted(plan["strategies"][0]["fits"]) == ["big", "small"]

    plan = c.cli_json("plan", "--params", "70B", "--mode", "inference",
                      "--dtype", "bf16", "--gpus", 1)
    assert plan["strategies"][0]["fits"] == []

    # 70B int4 (35e9 B + 1 GiB) fits the 80 GiB card only
    plan = c.cli_json("plan", "--params", "70B", "--mode", "inference",
                      "--dtype", "int4")
    assert plan["strategies"][0]["fits"] == ["big"]
    # two GPUs per node are needed: no node has two
    plan = c.cli_json("plan", "--params", "8B", "--mode", "inference", "--gpus", 2)
    assert plan["strategies"][0]["fits"] == []

    _, out, _ = c.cli("plan", "--params", "70B", "--mode", "inference")
    assert "none" in out and "skipped" not in out


def test_silent_coordinator_skips_fitting(make_cluster):
    c = make_cluster()
    c.coordinator.kill()
    # (the coordinator is gone: each call waits out its --timeout)
    rc, out, err = c.cli("plan", "--params", "8B", "--mode", "full", timeout_flag="300ms",
                         check=False)
    assert rc == 0, err
    assert "(no cluster: skipped fitting)" in out
    rc, out, err = c.cli("plan", "--params", "8B", "--mode", "full", "--json",
                         timeout_flag="300ms", check=False)
    assert rc == 0, err
    plan = json.loads(out)
    assert plan["fits_checked"] is False
    assert "skipped fitting" in err


def test_model_sized_jobs(make_cluster):
    """A spec that gives model: instead of resources.vram is sized by the planner:
    8B bf16 inference (16e9 B + 1 GiB) runs on the 24 GiB card with one GPU, a 70B
    full fine-tune fits no node and stays pending with a reason that says why."""
    c = make_cluster()
    tok = c.token(uses=2)
    c.start_agent("small", token=tok, extra=["--gpus", "RTX 4090:24GiB"])
    c.start_agent("big", token=tok, extra=["--gpus", "A100:80GiB"])
    c.wait_ready("small", "big")

    big = c.submit("name: finetune-70b\ncommand: \"true\"\n"
                   "model: {params: 70B, mode: full}\n")
    small = c.submit("name: serve-8b\ncommand: echo CUDA=[$CUDA_VISIBLE_DEVICES]\n"
                     "model: {params: 8B, mode: inference, dtype: bf16}\n"
                     "resources: {gpu_model: [RTX]}\n")
    j = c.wait_job(small, ("completed", "failed", "cancelled"))
    assert j["state"] == "completed", j
    assert j["nodes"] == ["small"], j
    assert j["spec"]["resources"]["vram"] == 16 * 10**9 + 2**30, j["spec"]["resources"]
    assert "per GPU from model: 8B parameters, inference, bf16" in j["spec"]["sizing"]
    assert any("from model" in (e["reason"] or "") for e in j["events"]), \
        json.dumps(j["events"], indent=1)
    assert "CUDA=[0]" in c.wait_logs(small, "CUDA=")

    def waiting():
        j = c.job(big)
        return j if j["state"] == "pending" and "VRAM" in (j["reason"] or "") else None
    j = wait_for(waiting, what="the 70B job to say why it waits")
    need = 16 * 70 * 10**9 + 2**30
    assert j["spec"]["resources"]["vram"] == need, j["spec"]["resources"]
    assert "small" in j["reason"] and "big" in j["reason"], j["reason"]
