"""time_limit is enforced the way a job can live with (docs/spec.md): past its
limit every process of the job gets SIGTERM, and what is still there after the
coordinator's --kill-grace gets SIGKILL. However it then ends, the job fails with
"time limit ... reached", and is not restarted."""

import time

from conftest import wait_for


def test_time_limit_sends_sigterm_then_sigkill(make_cluster):
    c = make_cluster(heartbeat="200ms", start=False)
    c.start_coordinator(extra=["--kill-grace", "2s"])
    c.add_agents(1)
    # a job that saves its work on SIGTERM, then exits
    polite = c.submit("name: polite\n"
                      "command: \"trap 'echo saving on TERM; exit 7' TERM; echo started; "
                      "while true; do sleep 0.1; done\"\n"
                      "time_limit: 2s\nrestart: {on: [nonzero_exit], max: 3}\n")
    # and one that ignores it
    stubborn = c.submit("name: stubborn\n"
                        "command: \"trap '' TERM; echo started; while true; do sleep 0.1; "
                        "done\"\ntime_limit: 2s\n")
    for jid in (polite, stubborn):
        c.wait_logs(jid, "started")
    began = time.monotonic()
    job = c.wait_job(polite, "failed")
    assert job["reason"].startswith("time limit 2s reached"), job
    assert job["attempt"] == 1 and job["exit_code"] == 7, job  # not restarted
    c.wait_logs(polite, "saving on TERM")
    events = [e["reason"] for e in job["events"]]
    assert any("SIGTERM sent, SIGKILL in 2s" in (r or "") for r in events), events

    job = c.wait_job(stubborn, "failed")
    waited = time.monotonic() - began
    assert job["reason"].startswith("time limit 2s reached"), job
    assert job["signal"] == 9, job  # SIGKILL, after the grace
    assert waited >= 1.5, waited  # not before the grace (less the polite job's start)
    wait_for(lambda: not c.job_procs(stubborn), what="the stubborn job's processes to go")
