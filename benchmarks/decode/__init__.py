"""Decoding speed: the KV cache against recomputing the whole prefix for every new token.

`python -m benchmarks.decode [--small] [--repeats N] [--json FILE]`, or with the training
figures in `./noxw -s bench`. The modules: measure (the runs and the report), recompute (the
no-cache side), sizes (bytes by hand), predict (FLOPs and roofline), memory (XLA's accounting);
roofline (`--roofline`: the cached step alone at the 0.55B bench shapes against the memory's
bandwidth, its own docstring).

Both decode the same left-padded batch of prompts greedily on one device:

- cached: pax.decode's generator, the one the decode modes run: the prompt is prefilled in one
  pass, then each step feeds one token per row and attends over the cache (one jitted while
  loop; compilation is excluded by a warm-up call). Timed end to end, median of the repeats.
- recompute: every step runs the model over the whole sequence so far and takes the last
  position's logits. The sequence is padded up to a multiple of BUCKET tokens, so the step
  compiles once per bucket instead of once per length (the padding comes after the last real
  token: causal attention makes it invisible). A step's time depends only on its bucket, so the
  loop's time is the sum over its steps of the measured time of one step at that step's bucket
  (median of the repeats); at the shorter length the real loop also runs end to end, and its
  time is printed beside that sum as a check of the method.

The predicted speed-up is the ratio of the two computations' forward FLOPs (pax.train.mfu's
per-token count, which includes attention over the span each token attends to): the cached
path attends over the whole cache buffer (prompt bucket + new tokens) at every step, the
recompute path over its bucket. The claim checked: measured / predicted within [0.5, 2].

FLOPs alone cannot be matched by a cached step: it does ~1 flop per 2 bytes of cache it reads
(one multiply-add per f32 key or value element), so it runs at the memory's speed, not the
matmul peak. A second prediction is the roofline: each step, of either side, takes at least
max(FLOPs / peak FLOP/s, bytes / read bandwidth), with the peak (an n x n matmul) and the
bandwidth (a sum over a buffer far larger than the caches) measured in the same run, and the
bytes the least a step must move (`step_bytes`): every parameter once, plus for a cached step
the whole cache buffer (keys, values, slot positions and segment ids of every layer), for a
recompute step the keys and values of its own sequence, written and read once (its attention
scores could stay on chip, so they are not counted: this favours the recompute side). The
claim checked beside the first: measured / roofline-predicted speed-up within [0.5, 2]; each
side's roofline time over its measured time is printed too (how close each runs to its floor).

Memory, from XLA's own accounting of the compiled generator (`memory_analysis()`: arguments,
outputs, temporaries, aliased bytes; its peak is arguments + outputs + temporaries - aliased,
the temporaries being one buffer that XLA's assignment sizes for the most bytes live at once),
next to what decoding needs by hand: the parameters (the arguments: decode restores nothing
else), the cache buffer, and the activations (`activation_bytes`, an upper bound). Where the
device reports its own peak (`memory_stats()`, not on CPU), that is printed too. Two copies are
priced: the stacked weights sliced into per-layer arrays on every call (`unscan`), by compiling
and timing the same generator on weights laid out unrolled beforehand, and a decode step's
copy of the cache, by the temporaries of one compiled step (a copy needs the cache's bytes).
"""
