#!/usr/bin/python
# -*- coding: utf-8 -*-
# cudafix's Ansible module: repairs a Python GPU environment with `cudafix fix`, or, in check
# mode, says what it would change (`cudafix fix --dry-run`, which changes nothing). With `lock:`,
# brings the environment to a PEP 751 lock (`cudafix sync LOCK -y`), or only checks it against one
# (`cudafix doctor --lock LOCK`: drift fails the task and changes nothing).
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: cudafix
short_description: Repair the CUDA libraries of a Python environment with cudafix
description:
  - Runs C(cudafix fix -y --json) on a venv; in check mode C(cudafix fix --dry-run --json), which
    plans and runs doctor but changes nothing.
  - C(changed) only when cudafix carried out steps; a second run on a repaired venv is C(ok).
  - The diff shows doctor's errors before and after.
  - Fails with cudafix's message and exit code when no safe plan exists, a wheel is found
    nowhere, or a step's GPU verification fails (cudafix then rolled everything back).
  - With I(lock), C(cudafix sync LOCK -y --json) instead (C(--dry-run) in check mode), or with
    I(lock_mode=check) C(cudafix doctor --lock LOCK --json), which changes nothing and fails when
    the environment drifted from the lock (each drift in C(drift)).
options:
  venv:
    description: The environment (a venv root or an interpreter prefix).
    required: true
    type: path
  find_links:
    description: Folders of wheels to repair from (C(--find-links)).
    type: list
    elements: path
    default: []
  index_url:
    description: A package index (Simple API) to fetch wheels from.
    type: str
  offline:
    description: No network; wheels from I(find_links) and the pip, uv and cudafix caches only.
    type: bool
    default: false
  cuda_major:
    description: The CUDA major to repair for (default, the one the consumers need).
    type: int
  verify:
    description:
      - Verify after each step with a live cuInit and cuDNN handle (rolled back when it fails).
      - Where no GPU driver is present the steps are kept and the result says C(verified=false).
    type: bool
    default: true
  lock:
    description: A PEP 751 lock (C(pylock.toml), written by C(cudafix lock), uv or pip) the environment must match.
    type: path
  lock_mode:
    description:
      - C(sync) brings the environment to exactly the lock (C(cudafix sync LOCK -y)), as one transaction.
      - C(check) only compares (C(cudafix doctor --lock LOCK)); never changed, failed on drift.
    type: str
    choices: [sync, check]
    default: sync
  binary:
    description: The cudafix to run (default, the one on PATH).
    type: path
    default: cudafix
"""

EXAMPLES = r"""
- name: Repair the training venv from the image's wheel folder
  cudafix:
    venv: /opt/train/.venv
    find_links: [/opt/wheels]
    offline: true

- name: Fail the play on a node whose venv drifted from the image's lock
  cudafix:
    venv: /opt/train/.venv
    lock: /opt/train/pylock.toml
    lock_mode: check

# A cleanup step under `cudafix guard` (Ansible's command module): a pip uninstall that would
# break a required library is refused before pip runs (rc 1, the reason on stderr); a command
# that breaks one is undone from a snapshot (rc 1); otherwise rc is pip's own.
- name: Remove the CUDA 12 leftovers, guarded
  ansible.builtin.command:
    argv: [cudafix, guard, --json, --venv, /opt/train/.venv, --,
           /opt/train/.venv/bin/python, -m, pip, uninstall, -y, nvidia-cudnn-cu12]
  register: cleanup
  changed_when: "'Successfully uninstalled' in cleanup.stdout"
"""

RETURN = r"""
steps:
  description: The steps carried out (in check mode, the ones that would be).
  type: list
  returned: always
before:
  description: doctor's errors and warnings before.
  type: dict
  returned: always
after:
  description: doctor's errors and warnings after (in check mode, absent).
  type: dict
  returned: when changed
verified:
  description: Whether each step was verified on the GPU.
  type: bool
  returned: when changed
transaction:
  description: The transaction id; C(cudafix rollback ID) undoes it.
  type: str
  returned: when changed
drift:
  description: With I(lock_mode=check), each drift finding's message (empty when the environment matches the lock).
  type: list
  returned: with lock_mode=check
exit_code:
  description:
    - cudafix's exit code (0 done and verified, or nothing to do; 4 done without a GPU driver to
      verify with). Not named C(rc), which Ansible reads as failure when it is not 0.
    - On failure C(rc) is cudafix's exit code (1 no safe plan or a verification failed and all was
      undone, 2 could not run).
  type: int
  returned: always
"""

import json

from ansible.module_utils.basic import AnsibleModule


def health_line(h):
    if not h:
        return ""
    rules = ", ".join(h.get("error_rules", []))
    return "%d errors%s, %d warnings\n" % (h.get("errors", 0), " (%s)" % rules if rules else "", h.get("warnings", 0))


def run_cudafix(module, args):
    """cudafix's exit code and its JSON document (the last line of its output)."""
    rc, out, err = module.run_command(args, environ_update={"VIRTUAL_ENV": ""})
    try:
        doc = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    except ValueError:
        module.fail_json(msg="cudafix printed no JSON: %s" % (err or out).strip(), rc=rc, cmd=args)
    return rc, doc, err


def fail_on(module, rc, doc, err, args, ok=(0, 4)):
    if rc not in ok:
        message = doc.get("error") or (err.strip().splitlines() or ["cudafix exited %d" % rc])[-1]
        module.fail_json(msg="cudafix: %s" % message, rc=rc, cmd=args, stderr=err, result=doc)


def source_args(p, with_verify=True):
    """The wheel sources (cudafix's common options), and --no-verify where the command takes it."""
    args = []
    for folder in p["find_links"]:
        args += ["--find-links", folder]
    if p["index_url"]:
        args += ["--index-url", p["index_url"]]
    if p["offline"]:
        args.append("--offline")
    if with_verify and not p["verify"]:
        args.append("--no-verify")
    return args


DRIFT_RULES = "lock-package-drift,lock-file-drift,lock-verdict-drift"


def check_lock(module, binary):
    """lock_mode=check: doctor's lock-*-drift rules; never changed, failed on any drift."""
    p = module.params
    args = [binary, "doctor", "--json", "--venv", p["venv"], "--lock", p["lock"], "--select", DRIFT_RULES]
    rc, doc, err = run_cudafix(module, args)
    fail_on(module, rc, doc, err, args, ok=(0, 1))
    drift = ["%s: %s" % (f.get("rule"), f.get("message")) for f in doc.get("findings", [])]
    if drift:
        module.fail_json(msg="cudafix: %s drifted from %s: %s" % (p["venv"], p["lock"], "; ".join(drift[:3])),
                         rc=rc, cmd=args, changed=False, drift=drift, exit_code=rc)
    module.exit_json(changed=False, drift=[], exit_code=rc, cmd=args)


def sync_lock(module, binary):
    """lock_mode=sync: `cudafix sync LOCK -y` (in check mode --dry-run)."""
    p = module.params
    args = [binary, "sync", p["lock"], "--json", "--venv", p["venv"]]
    args += ["--dry-run"] if module.check_mode else ["-y"]
    args += source_args(p, with_verify=False)  # sync LOCK [--dry-run] [-y]: it always verifies
    rc, doc, err = run_cudafix(module, args)
    fail_on(module, rc, doc, err, args)
    steps = doc.get("steps", [])
    changed = bool(steps) if module.check_mode else bool(doc.get("changed"))
    result = dict(changed=changed, steps=steps, exit_code=rc, cmd=args, verified=doc.get("verified", False),
                  transaction=doc.get("transaction"))
    warnings = ["cudafix synced the venv but found no GPU driver to verify it with"] if rc == 4 else []
    module.exit_json(warnings=warnings, **result)


def fix(module, binary):
    p = module.params
    args = [binary, "fix", "--json", "--venv", p["venv"]]
    args += ["--dry-run"] if module.check_mode else ["-y"]
    args += source_args(p)
    if p["cuda_major"] is not None:
        args += ["--cuda-major", str(p["cuda_major"])]
    rc, doc, err = run_cudafix(module, args)
    fail_on(module, rc, doc, err, args)
    plan_steps = ["%s %s %s" % (s.get("action"), s.get("name"), s.get("version"))
                  for s in doc.get("plan", {}).get("steps", [])]
    result = dict(exit_code=rc, before=doc.get("before"), cmd=args)
    if module.check_mode:
        result.update(changed=bool(plan_steps), steps=plan_steps)
        if plan_steps:
            result["diff"] = dict(before=health_line(doc.get("before")),
                                  after="(check mode) would carry out: %s\n" % "; ".join(plan_steps))
        module.exit_json(**result)
    changed = bool(doc.get("changed"))
    result.update(changed=changed, steps=doc.get("steps", []), after=doc.get("after"),
                  verified=doc.get("verified", False), transaction=doc.get("transaction"), cudnn=doc.get("cudnn"))
    if changed:
        result["diff"] = dict(before=health_line(doc.get("before")), after=health_line(doc.get("after")))
    warnings = []
    if rc == 4:
        warnings.append("cudafix carried out the steps but found no GPU driver to verify them with")
    module.exit_json(warnings=warnings, **result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            find_links=dict(type="list", elements="path", default=[]),
            index_url=dict(type="str"),
            offline=dict(type="bool", default=False),
            cuda_major=dict(type="int"),
            verify=dict(type="bool", default=True),
            lock=dict(type="path"),
            lock_mode=dict(type="str", choices=["sync", "check"], default="sync"),
            binary=dict(type="path", default="cudafix"),
        ),
        supports_check_mode=True,
    )
    binary = module.params["binary"]
    if "/" not in binary:
        binary = module.get_bin_path(binary, required=True)
    if not module.params["lock"]:
        fix(module, binary)
    elif module.params["lock_mode"] == "check":
        check_lock(module, binary)
    else:
        sync_lock(module, binary)


if __name__ == "__main__":
    main()
