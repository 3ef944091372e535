"""How every bench times commands: all the commands being compared run in turn, round after round,
so that a machine that slows down for a while (a noisy VM, write-back of a venv just written)
slows each of them alike instead of whichever happened to run then."""
import os
import random
import statistics
import subprocess
import sys
import time


def settle():
    """Writes back what materialising a venv left dirty, so that no bench pays for it, and waits
    out the 2 s within which cudafix's walk cache does not keep a folder's listing
    (resolver/env/walk_cache.hpp), so that a venv just written is cached like any other."""
    os.sync()
    time.sleep(2.1)


def with_walk_cache(env, folder):
    """`env` with cudafix's walk cache in `folder`, a bench's own, not the user's ~/.cache."""
    return dict(env, CUDAFIX_CACHE_DIR=folder)


def alternated(cmds, runs, env=None, cwd=None, check=False):
    """Runs each command of `cmds` (name -> argv) once to warm the page cache, capturing what it
    prints, then `runs` timed rounds of one run each, in turn (each round in its own order),
    printing to /dev/null: the time is the command's own, not that of Python reading its output.
    Returns (median seconds by name, the warm-up's CompletedProcess by name). With `check`, a
    command that fails ends the bench."""
    times = {name: [] for name in cmds}
    warm = {name: subprocess.run(cmd, env=env, cwd=cwd, capture_output=True) for name, cmd in cmds.items()}
    for name, r in warm.items():
        if check and r.returncode != 0:
            sys.exit(f"{' '.join(cmds[name])} failed: {r.stderr.decode()[-500:]}")
    # Each round in its own order (shuffled, the same in every bench run): the command run just
    # after a slow one (a 1.3 s pip check) ran 5 ms slower on 2 cores, and a fixed order gave that
    # to the same one every round.
    order = random.Random(0)
    for _ in range(runs):
        names = list(cmds)
        order.shuffle(names)
        for name in names:
            cmd = cmds[name]
            start = time.perf_counter()
            subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}, warm
