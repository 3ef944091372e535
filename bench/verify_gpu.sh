#!/usr/bin/env bash
# `cudafix verify` on the GPU machine's real venv (hardlink copies only), every scenario issue 5
# names, and its time against the same calls from Python with ctypes. Results go to $OUT.
#   bench/make_relocatable.sh && (device, carrying .dev/cudafix-dist) bash bench/verify_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
copy_venv /tmp/v
copy_venv /tmp/v2
site=$(echo /tmp/v/lib/python3*/site-packages)
log=$OUT/verify.txt
run() {  # name, command...
  local name=$1
  shift
  echo "=== $name: $*" >> "$log"
  "$@" > "$OUT/$name.json" 2>> "$log"
  echo "rc=$?" >> "$log"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['outcome'], '|', d['message']); [print('  check', c['check'], c['ok'], c['detail']) for c in d['checks']]; [print('  diag', e['likely'], e['cause'], '=>', e['result']) for e in d['diagnosis']]; print('  devices', d['devices']); print('  warnings', d['warnings'])" "$OUT/$name.json" >> "$log" 2>&1
}
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" > "$log"
run ok "$C" verify --venv /tmp/v --json
"$C" verify --venv /tmp/v -v --color never > "$OUT/ok.txt" 2>&1
run no_device env CUDA_VISIBLE_DEVICES= "$C" verify --venv /tmp/v --json
run under_timeout timeout 30 "$C" verify --venv /tmp/v --json
# An interval timer firing every millisecond (SIGALRM ignored, so it survives exec into cudafix).
run under_itimer python3 -c 'import os,signal,sys; signal.signal(signal.SIGALRM, signal.SIG_IGN); signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001); os.execv(sys.argv[1], sys.argv[1:])' "$C" verify --venv /tmp/v --json
# The same with SIGALRM blocked instead: the probe must start with a clean mask.
run under_blocked python3 -c 'import os,signal,sys; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM}); signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001); os.execv(sys.argv[1], sys.argv[1:])' "$C" verify --venv /tmp/v --json
run compat_803 "$C" verify --venv /tmp/v --json --ld-library-path /usr/local/cuda-13.0/compat
stub=$(mktemp -d) && ln -s "$(ls /usr/local/cuda*/lib64/stubs/libcuda.so | head -1)" "$stub/libcuda.so.1"
run stub_34 "$C" verify --venv /tmp/v --json --ld-library-path "$stub"
(cd /tmp && /tmp/v2/bin/python3 -m pip uninstall -y nvidia-cudnn-cu13) >> "$log" 2>&1
run after_uninstall "$C" verify --venv /tmp/v2 --json
"$C" verify --venv /tmp/v2 --color never > "$OUT/after_uninstall.txt" 2>&1

# Time: cudafix verify (scan + probe) against the same calls from Python with ctypes, alternated.
python3 - "$C" "$site" > "$OUT/times.txt" 2>&1 <<'PY'
import statistics, subprocess, sys, time
cudafix, site = sys.argv[1], sys.argv[2]
runs = {"cudafix verify": [cudafix, "verify", "--venv", "/tmp/v", "-q"],
        "python ctypes": ["/tmp/v/bin/python3", "bench/verify_ctypes.py", site + "/torch/lib/libtorch_cuda.so"]}
t = {k: [] for k in runs}
for _ in range(5):
    for k, cmd in runs.items():
        s = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        t[k].append(time.perf_counter() - s)
        print(k, f"{t[k][-1]*1000:.0f} ms rc={r.returncode}", r.stdout.strip()[-200:])
c, p = statistics.median(t["cudafix verify"]), statistics.median(t["python ctypes"])
print(f"median: cudafix verify {c*1000:.0f} ms, python ctypes {p*1000:.0f} ms, ratio {c/p:.2f}")
PY
rm -rf /tmp/v /tmp/v2
