"""The fault-injection suite: bad input, kills, signals, full disks, NaNs, corrupt files.

Bad inputs covered, per file (``pytest --collect-only -q tests/reliability -m ""``, 2026-12-04):

| file | cases | what |
|---|---|---|
| test_bad_configs.py | 693 | every init argument of every algorithm, task and model, wrong type or out of range (generated) |
| test_corrupt_checkpoints.py | 56 | missing, truncated, foreign, mismatched checkpoints and replay sidecars |
| test_result_files.py | 32 | report / compare / test / export inputs: truncated, empty, wrongly shaped, binary, missing (31 + count) |
| test_simulator_refusals.py | 26 | a simulator refusing the task's arguments, every task family |
| test_error_messages.py | 15 | wrong types, unknown keys, YAML tabs and syntax, scenario typos, budget below one batch |
| test_no_silent_harm.py | 7 | gradient clipping at 0 / below 0 / unknown algorithm, a wrongly typed simulator argument, merged kwargs |
| test_run_folders.py | 7 | default_root_dir, exclusive version folders |

Faults: test_signals.py (12: SIGTERM, SIGUSR1, Ctrl-C at every phase of an iteration, twice), test_kill_anywhere.py
(5: SIGKILL and Ctrl-C at random moments, kills during checkpoint writes), test_numerical_faults.py (12),
test_disk_full.py (5), test_metrics_file.py (3), test_determinism.py (1).
"""
