"""Autotuning of the CPU backend's kernels (docs/autotuning.md).

- `params.py`: the tunable choices of each route as parameters, their search spaces and
  the cost model that gives their defaults;
- `machine.py`: the identity of this machine a tuning database belongs to;
- `database.py`: the per-machine database of winners, kept in the on-disk cache;
- `selection.py`: which parameters a kernel of a compile uses (the emitters ask it), and
  what the executable cache key and `parameters_of(executable)` report;
- `tuner.py`: measuring candidates in a child process (`worker.py`) and recording winners.
"""
