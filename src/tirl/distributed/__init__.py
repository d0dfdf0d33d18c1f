"""Distributed parts, one module per job.

- :mod:`tirl.distributed.ddp` — one rank's device, the process group and :class:`~tirl.distributed.ddp.DDPSync`
  (the gradient-sync strategy a rank gives its :class:`~tirl.trainer.update.PolicyUpdater`);
- :mod:`tirl.distributed.launch` — ``--nproc N`` on this machine: checks, follower processes, rank 0's group;
- :mod:`tirl.distributed.follower` — ranks 1..N-1;
- :mod:`tirl.distributed.ray_ranks` — ``--backend ray --nproc N``: every rank a Ray Train worker;
- :mod:`tirl.distributed.ray_backend` — environments and their sandboxes on Ray actors.

This package depends on :mod:`tirl.trainer` (the learner factory, the updater, the recipe); nothing in
:mod:`tirl.trainer` imports it except the Ray env hosts of the wiring (``tests/test_package.py`` forbids cycles).
"""
