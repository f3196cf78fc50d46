"""Served decode on one GPU, as a vLLM user runs it: engine processes of vLLM's offline
``LLM`` (CUDA graphs, the scheduler, async scheduling, the sampler), several alive at once and
taking turns, so that trees are measured interleaved in the same minutes.

- ``turns``: the round-robin turns of the processes of one wave (a lock file and a state file);
- ``engine``: one engine process: start-up, greedy tokens, TPOT at each batch size, a trace;
- ``trace``: a torch-profiler trace of decode steps -> GPU busy / idle per step, the MoE share,
  the kernels launched per step;
- ``predict``: the saving the layer benchmark predicts for a served arm, from the layer table
  of the report's choice or of the round's own machine;
- ``report``: the processes' records -> one table per flavour, ratios against the base, the
  saving predicted.
"""
