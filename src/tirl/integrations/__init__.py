"""Where users already are: other frameworks' environments in tirl, and tirl's void filter in other trainers.

* :mod:`tirl.integrations.skyrl_gym` — skyrl-gym environments (``--env skyrl-gym``, ``skyrl-gym:NAME``);
* :mod:`tirl.integrations.verifiers_env` — verifiers ``MultiTurnEnv``/``ToolEnv`` (0.3.x) environments;
* :mod:`tirl.integrations.trl` — the void filter inside TRL's ``GRPOTrainer``;
* :mod:`tirl.integrations.verl` — dropping void trajectories from a verl ``DataProto`` batch.

Each module imports its framework lazily and says what it does and does not cover.
"""
