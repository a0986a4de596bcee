"""Every threshold the triage table uses, in one place, with the reasoning beside it.

Ratios compare the incident window with the baseline window (same service, same hours of an
ordinary day): thresholds are relative so they hold for a 7B model on one GPU and a 400B model on
sixteen. Absolute floors exist only where users feel absolute time.

The rows compare numbers with these constants only through :mod:`perfkit.triage.row_types`
(``at_least(value, "TAIL_RATIO")``), which records each comparison as a ``Cut``: its name here,
the value, the cut-off and how far apart they were. A cut-off may be derived from a constant
(a multiple of the baseline's own value); it is still named by the constant.

The analyses the rows read cannot import this module (the layer rule: analyses sit below triage),
so their own cut-offs live beside their code, each with its reason (a docstring under the constant),
and are re-exported just below: what decides a change point, a deploy's blame and a loss spike is
listed here too, and the deploy row records the first three as cuts.
"""

from __future__ import annotations

# change points (analyses/changepoints.py): what counts as a level shift
from perfkit.analyses.changepoints import MAX_POINTS as MAX_POINTS
from perfkit.analyses.changepoints import MIN_REL_CHANGE as MIN_REL_CHANGE
from perfkit.analyses.changepoints import MIN_SEGMENT_POINTS as MIN_SEGMENT_POINTS
from perfkit.analyses.changepoints import SHIFT_SCORE as SHIFT_SCORE
from perfkit.analyses.changepoints import SMOOTH_POINTS as SMOOTH_POINTS

# memory estimate (analyses/memory.py), in the OOM row's why only: when it agrees with FB_USED
from perfkit.analyses.memory import AGREE_SHARE as AGREE_SHARE

# release correlation (analyses/release.py): which shift a deploy is blamed for
from perfkit.analyses.release import ALIGN_AFTER_STEPS as ALIGN_AFTER_STEPS
from perfkit.analyses.release import ALIGN_BEFORE_STEPS as ALIGN_BEFORE_STEPS
from perfkit.analyses.release import ALIGN_MIN_S as ALIGN_MIN_S
from perfkit.analyses.release import MIN_STEP_S as MIN_STEP_S
from perfkit.analyses.release import PERSIST_SHARE as PERSIST_SHARE
from perfkit.analyses.release import PRE_DEPLOY_DRIFT as PRE_DEPLOY_DRIFT

# decode roofline (analyses/roofline.py), in the decode-efficiency row's why only (no verdict hangs on it)
from perfkit.analyses.roofline import NEAR_BOUND_SHARE as NEAR_BOUND_SHARE
from perfkit.analyses.roofline import SAME_BATCH_RATIO as SAME_BATCH_RATIO
from perfkit.analyses.roofline import SHARE_DROP_RATIO as SHARE_DROP_RATIO

# training evidence (analyses/training_evidence.py): the loss's shape
from perfkit.analyses.training_evidence import MIN_LOSS_POINTS as MIN_LOSS_POINTS
from perfkit.analyses.training_evidence import MIN_SCRAPE_S as MIN_SCRAPE_S
from perfkit.analyses.training_evidence import SPIKE_MADS as SPIKE_MADS
from perfkit.analyses.training_evidence import SPIKE_ROLLING_POINTS as SPIKE_ROLLING_POINTS

# -- "is it worse?" ------------------------------------------------------------------------
TAIL_RATIO = 1.5
"""TTFT p95 (or the per-token p99) at least 1.5x the baseline: one request in twenty half again
slower than on an ordinary day is what users of a chat product report as "sometimes it hangs".
The row needs the median to stay put as well, so this only has to clear the hour-to-hour wobble of
a p95 (~10-20 %); the seed's case (P95 3-4 s against ~1.2 s after the fix) is 3x. The per-token
p99 also moves with load (a busy evening reads 1.7x): the row's long-prompt gate keeps that out."""
MEDIAN_FINE_RATIO = 1.3
"""TTFT p50 within 1.3x the baseline: "P50 looks fine" (the seed's §5.3 case): the typical request
is as users know it (0.2 s → 0.26 s), so what got slow is a subset, the tail."""
TTFT_RATIO = 1.5  # TTFT p95 up 50 %: users notice slower first tokens well before SLOs break
SLO_BREACH_RATIO = 1.0  # a value over the incident's own SLO (incident.yaml slo:) is a breach
PREFILL_RATIO = 1.5  # prefill p95 up 50 %: "prefill slow"
TPOT_MEDIAN_RATIO = 1.25  # the *median* token got 25 % slower: the whole distribution moved
LATENCY_MEDIAN_RATIO = 2.0
"""TTFT (or E2E) p50 doubled: everyone is affected, not only the tail ("latency jumps"). Whether it
is the scheduler queue is the verification's question (queue time and length)."""
MIN_TAIL_DELTA_S = 0.25  # a p95 change under 250 ms is not what paged anyone

# -- load and capacity ---------------------------------------------------------------------
LOAD_RATIO = 1.2  # offered load (requests or generated tokens per second) up 20 %: a load change worth naming
RESTART_BACKLOG_S = 300.0
"""A server restarted inside the window is handed, at once, every request that arrived while it was
down: its KV cache fills and its prefills queue for the minutes that backlog takes to drain. The KV
cache's peak is read outside the first 5 minutes after each restart (the completeness check finds
them), so a restart is not read as KV pressure; pressure that lasts is still seen after them."""
PROMPT_LOAD_RATIO = 1.2
"""Prompt tokens per second up 20 % at the same request rate (longer prompts): prefill work shares the
engine's steps with the decodes (chunked prefill) or pauses them (whole-prompt prefill steps), so the
median token waits longer without any loss of decode efficiency. The same 20 % as ``LOAD_RATIO``."""
QUEUED_AVG = 5.0  # requests waiting on average: a standing queue, not a blip
QUEUED_CONFIRM_MIN = 1.0  # at least one request waiting on average: queue time is not one burst's
QUEUE_SHARE_CONFIRM = 0.5  # queue time is at least half of mean TTFT: the wait is in the scheduler
QUEUE_SHARE_RULE_OUT = 0.2  # under a fifth of TTFT in the queue: the scheduler is not where time goes
PREFILL_SHARE_RULE_OUT = 0.5  # prefill under half of mean TTFT: the first token waits elsewhere
KV_FULL_FRAC = 0.9  # vLLM starts preempting near a full KV cache
KV_CALM_FRAC = 0.8  # a KV cache that never passes 80 % has room: allocation is not the bottleneck
PREEMPTIONS_PER_S = 0.01  # more than one preemption per 100 s
PREFIX_HIT_DROP = 0.2  # prefix-cache hit rate down 20 points: the cache no longer holds the shared prefixes

# -- prefill/decode interference -----------------------------------------------------------
LONG_PROMPT_MULTIPLE = 8.0  # "long" = 8x the baseline median prompt (rounded up to a bucket bound)
LONG_PROMPT_SHARE = 0.002  # at least 0.2 % of requests are long: enough to stall decodes often
LONG_SHARE_RISE = 3.0
"""The long-prompt share at least 3x the baseline's: the traffic mix changed (a new tenant, a batch
job), not the ordinary few long prompts every day has."""
LONG_SHARE_FLOOR = 0.0002  # a baseline share under 0.02 % (a tenth of LONG_PROMPT_SHARE) is read as 0.02 %
STALL_MIN_S = 0.5  # an inter-token gap of 0.5 s+ is a visible stutter ...
STALL_MEDIAN_MULTIPLE = 10.0  # ... and at least 10x the median ITL ...
STALL_WORST_MULTIPLE = 2.0  # ... and twice the baseline's p99.9 (its normal worst gap)
STALL_WORST_QUANTILE = 0.999  # the baseline's "normal worst" inter-token gap: one token in a thousand
MIN_PREFILL_BATCHES = 30
"""SGLang's log gives interference only with at least 30 prefill batches in each window: fewer, and
the median batch (the yardstick of a long one) rests on a handful of requests."""
INTERFERENCE_BIN_S = 120.0
"""Long-prompt arrivals and ITL stalls are lined up in two-minute bins: a long prompt arriving late
in a minute stalls the decodes of the next one, and a 20-minute window still gives ten bins."""
MIN_CORRELATION_BINS = 10
"""Fewer bins than ten give a correlation too wide to read (its 90 % band spans ±0.5)."""
STALLS_PER_MIN = 1.0
"""At least one decode stall a minute across the server (ITL gaps past the stall threshold): a
stutter users of a busy chat service see every few minutes, not a once-an-hour event."""
STALL_RISE = 3.0
"""Stalls at least 3x as frequent as in the baseline: the freezes are new."""
STALL_BASELINE_FLOOR_PER_MIN = 0.1
"""A baseline with fewer stalls than one per 10 minutes is read as 0.1 a minute: a baseline without
any would make every incident rate an infinite rise."""
CORR_CONFIRM = 0.5
"""Correlation of long-prompt arrivals with ITL stalls in two-minute bins of 0.5+: the stalls follow
the arrivals closely enough to be their effect (r² = 0.25: a quarter of the bin-to-bin variance)."""
CORR_RULE_OUT = 0.2  # ... and under 0.2 (even at the top of its CORR_Z band): the stalls come from elsewhere
CORR_Z = 1.28
"""One-sided 90 % bound on a correlation (Fisher z ± 1.28/sqrt(n − 3)). Ten two-minute bins of
Poisson-few long prompts give a correlation that wanders ±0.35: a verdict needs its whole 90 % band
on one side of the cut, not its point estimate."""

# -- release correlation -------------------------------------------------------------------
LOAD_SHIFT_AT_DEPLOY = 0.2  # a request-rate shift of 20 %+ at the same minute muddies a deploy's blame
DEPLOY_TAIL_VIEWS = 1.5
"""A deploy blamed on tail quantiles alone (no median moved) needs them in at least two parts of a
request: prefill (TTFT p95), decode (ITL/TPOT p95), end to end (E2E p95). A p95 over one-minute
windows rests on a handful of requests; on an ordinary afternoon its level wanders 20-40 % (the
decoy-deploy control shows single p95 shifts of +30-40 % at a harmless deploy). A regression in the
serving path slows the median request, or more than one stage of the slow ones. (A count: the cut
sits between integers.)"""
MIX_STEADY = 0.07
"""A deploy blamed on a mean alone (an engine with no latency histogram: Triton's E2E mean from its
counters) holds only where the requests' mix did not grow at it: the mean prompt and output tokens per
request each at most 7 % above their level before (a lighter mix raises no mean). A request's time
grows with its tokens, and a few long prompts stall the requests batched with them, so a heavier mix
moves the E2E mean about three times as much as the tokens per request (a batch tenant's 1 % of very
long prompts: +11-12 % prompt tokens per request, +34 % E2E mean); a rise within 7 % explains about
20 %, the least a shift must be (``changepoints.MIN_REL_CHANGE``), so a shift at the deploy well past
that is not the mix's. Against noise: the level of a side is the median of its steps' means, each over
a few hundred heavy-tailed prompts, and an unchanged mix moves it -3 to +5 % (ten seeds of the
release regression told by Triton)."""

# -- GPU and host --------------------------------------------------------------------------
GPU_LOW_UTIL_PCT = 50.0  # DCGM_FI_DEV_GPU_UTIL average under 50 % during a training/serving incident
TENSOR_LOW_RATIO = 0.9
"""Tensor-pipe activity (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE) at most 0.9x the baseline: a tenth of
the useful GPU work gone. DCGM_FI_DEV_GPU_UTIL counts NCCL kernels spinning for a slow peer as
busy, so a starved or communication-bound job still reads 90 %+ util; the tensor pipes tell the
truth. A steady job holds its tensor activity within ~2 % between two windows, so 10 % is a real
loss, and one the size of the seed's cases (a scale-out that gave 40 % instead of 100 %)."""
CPU_BUSY_FRAC = 0.8  # host CPUs 80 %+ busy on average ...
BUSIEST_CPU_FRAC = 0.9  # ... or one core pinned at 90 %+ (a CPU-bound DataLoader worker keeps its core)
IOWAIT_FRAC = 0.2  # ... or 20 %+ of CPU time waiting on I/O (data on slow or network storage)
NET_RATIO = 1.5
"""Network throughput 1.5x the baseline: only where train_comm_seconds is not exported. A node's
eth0 also carries checkpoints, logs and dataset reads (a healthy run here reads 1.49x between two
windows), so bytes are support, the exposed-communication share is the evidence."""
DATA_WAIT_SHARE = 0.1  # data wait over 10 % of step time (reference §5.3: flag at 5-10 %)
DATA_WAIT_RISE = 3.0
"""Data wait at least 3x its baseline share: a pipeline that always waited 10 % is a tuning task,
not this incident (a baseline share under 0.1 % counts as 0.1 %: a timer's resolution)."""
DATA_WAIT_FLOOR = 0.001  # a baseline data-wait share under 0.1 % is read as 0.1 % (timer resolution)
STEP_JITTER = 0.05
"""The step time jumps by 5 %+ of itself from one scrape to the next (median over ranks): the seed's
§4.1 sign of an unsteady data supply ("utilisation jumps up and down"). A steady job on packed
batches varies under 1 %; a starving loader alternates between a ready batch and a wait (30 %+).
Unpacked variable-length batches jump ~10 % on their own: hence the rise over the baseline too."""
UTIL_SWING_PCT = 2.0
"""DCGM_FI_DEV_GPU_UTIL moves 2+ percentage points between consecutive scrapes on average: a GPU
fed in bursts. A busy, steady GPU reads 100 % at every scrape (swing ~0)."""
STEP_JITTER_FLOOR = 0.005  # a baseline jitter under 0.5 % is read as 0.5 % (a steady job)
UTIL_SWING_FLOOR_PCT = 0.5  # a baseline swing under 0.5 points is read as 0.5 (a GPU pinned at 100 %)
UNSTEADY_RISE = 2.0
"""The jitter or the swing at least twice the baseline's: a job fed from variable-length batches
always jumps a little; the sign is that it jumps more than it used to."""
NCCL_LINES = 0.5  # any NCCL WARN / timeout / error line in the window (a count cut sits between integers)
COMM_SHARE = 0.2  # exposed communication over 20 % of step time (seed §4.1: 20-30 %)
COMM_RISE = 1.5
"""Exposed communication at least 1.5x its baseline share: a job that always spent 25 % in
collectives (variable-length batches waiting for the slowest rank) has not lost its network."""
COMM_EXPLAINED_BY_WAIT = 0.8
"""Data wait on the slowest rank at least 0.8x the exposed communication: the other ranks' time
"in the collective" is them waiting for that rank's batch, not the network."""
LOSS_ROUGHNESS_RATIO = 3.0
"""The loss's robust scatter around its trend (``TrainingEvidence.loss_roughness``) at least 3x the
baseline's. Estimated from 60-80 scrapes, two windows of one healthy run differ by up to ~1.8x
(a MAD from n points wanders ~±15 % each); a missing warmup or an unshuffled data order scatters
the loss 5-30x."""
LOSS_SPIKE_ALERT = 0.5
"""Any spike episode in the incident window: what a loss alert fires on, so the row is looked at;
whether it is an instability is the verification's comparison with the baseline. (Cut-offs on a
count sit half-way between two integers: no count is ever on one.)"""
LOSS_SPIKES = 2.5
"""Three or more spike episodes more than the baseline had: spikes that recur (an optimiser at the
edge of stability). One or two with the scatter unchanged are bad batches."""
STEP_SLOWDOWN_RATIO = 1.3
"""Step time up 30 %+: the pipeline changed too; a loss compared at another throughput (other
batches, restarts from checkpoints) is not "the same data" the seed's check asks for."""
OOM_LINES = 0.5  # any CUDA out-of-memory line is the symptom (a count cut sits between integers)

# -- scoring -------------------------------------------------------------------------------
VERDICT_WEIGHT = {"confirmed": 1.0, "inconclusive": 0.45, "ruled_out": 0.1}
CONFIRM_MARGIN = 0.05
"""A confirmation that hangs on a comparison within 5 % (relative) of its cut-off is *leading, not
confirmed* (verdict ``inconclusive``, saying so): minute medians and ratios over a 20-40 minute window
wander by a few percent from one telling of the same incident to the next (other seeds, a looser
window), so such a case is one draw away from the other verdict. The embedded incidents all decide by
more (tests/triage/test_scenario_library.py); benchmarks/triage_accuracy.py flags cuts this close."""
OUTWEIGH_MARGIN = 0.5
"""A confirmatory cut (one that rules out another explanation, such as "the median is as usual"; each
row declares them: ``Row.confirms``) within ``CONFIRM_MARGIN`` of its cut-off is weighed, not taken as
a veto or a doubt, when every deciding cut of the row is at least 50 % past its own: ten times the few
percent a window's numbers wander between tellings, so no other telling of the same incident brings
the deciding evidence near its cuts, while the confirmatory one is a coin's toss either way. (The
seed's interference case, told on other shapes: stalls 28x the baseline against a 3x cut, r = 0.96
against 0.5, while the TTFT median sat 1-4 % from its "as usual" cut.)"""
EFFECT_DISCOUNT = 0.5  # a confirmed cause halves the score of the rows it explains


# -- strength formulas (how strongly a fired symptom shows, 0-1) -----------------------------
def ramp(x: float, zero: float, full: float) -> float:
    """0 at ``zero``, 1 at ``full``, linear between, clamped."""
    return max(0.0, min(1.0, (x - zero) / (full - zero)))


def tail_strength(tail_ratio: float, long_mixed: bool) -> float:
    """A tail 5x the baseline is as clear as a tail gets; halved while long prompts are unmeasured
    (the row's mechanism is then a guess)."""
    return ramp(tail_ratio, 1.0, 5.0) * (1.0 if long_mixed else 0.5)


def prefill_strength(prefill_ratio: float) -> float:
    """Prefill p95 4x the baseline is full strength."""
    return ramp(prefill_ratio, 1.0, 4.0)


def tpot_strength(median_ratio: float) -> float:
    """A median token 2.5x slower is full strength."""
    return ramp(median_ratio, 1.0, 2.5)


def load_strength(median_latency_ratio: float) -> float:
    """Median latency 10x the baseline (a queue that swallowed the service) is full strength."""
    return ramp(median_latency_ratio, 0.0, 10.0)


def deploy_strength(score: float) -> float:
    """A suspect's score is the sum of |log(1 + change)| over its shifts (release.py): one series
    doubling (0.69) reads 0.76; any suspect starts at 0.3 (a deploy a shift starts at is worth a look)."""
    return max(0.0, min(1.0, 0.3 + score / 1.5))


def oom_strength(lines: int) -> float:
    """One OOM line is 0.7; four or more are full strength (a crash loop)."""
    return max(0.0, min(1.0, 0.6 + lines / 10))


DATA_PIPELINE_STRENGTH = 0.6  # measured data wait alone ...
SUPPORT_STRENGTH = 0.1  # ... plus this for each supporting sign (CPU busy, iowait, jitter, GPU low)
NETWORK_STRENGTH = 0.7  # exposed communication up or NCCL warnings (or, unmeasured, GPU low and eth0 busy)


def loss_strength(roughness_ratio: float | None, spikes: int) -> float:
    """A loss 6x rougher than the baseline, or ten spikes, is full strength."""
    return max(0.0, min(1.0, (roughness_ratio or 1.0) / 6 + spikes / 10))
