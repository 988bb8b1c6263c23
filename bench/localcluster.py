"""localcluster.py - a local cluster for the benches: `bramble up` in a temporary
HOME, with the admin's credential, its agents and its gateway.

    lc = LocalCluster("build/bin", "bramble-gwbench-", agents=1)
    lc.run("endpoints", "llm", "--json")   # bramble there (CompletedProcess)
    lc.submit(yaml_text)                    # the new job's id
    lc.gw_port                              # the gateway `bramble up` started
    lc.down()                               # taken down, its directory removed
"""
import os
import shutil
import subprocess
import tempfile


class LocalCluster:
    def __init__(self, bin_dir, prefix, agents=1):
        self.bin = bin_dir
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.env = dict(os.environ, HOME=self.tmp,
                        BRAMBLE_CREDENTIAL=os.path.join(self.tmp, "admin.cred"))
        self.env.pop("XDG_DATA_HOME", None)
        self.dir = os.path.join(self.tmp, "c")
        try:
            out = self.run("up", "--dir", self.dir, "--agents", str(agents)).stdout
        except subprocess.CalledProcessError:
            self.down()
            raise
        self.gw_port = int(out.split("http://127.0.0.1:")[-1].split()[0].split("/")[0])

    def run(self, *argv, check=True):
        return subprocess.run([os.path.join(self.bin, "bramble"), *argv], env=self.env,
                              check=check, capture_output=True, text=True)

    def submit(self, yaml_text):
        spec = os.path.join(self.tmp, f"spec-{os.urandom(3).hex()}.yaml")
        with open(spec, "w") as f:
            f.write(yaml_text)
        return int(self.run("submit", spec).stdout.strip())

    def down(self):
        self.run("down", "--dir", self.dir, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)
