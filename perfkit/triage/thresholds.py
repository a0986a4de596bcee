"""Every threshold the triage table uses, in one place, with the reasoning beside it.

Ratios compare the incident window with the baseline window (same service, same hours of an
ordinary day): thresholds are relative so they hold for a 7B model on one GPU and a 400B model on
sixteen. Absolute floors exist only where users feel absolute time.
"""

# -- "is it worse?" ------------------------------------------------------------------------
TAIL_RATIO = 2.0  # p95/p99 at least 2x the baseline: a tail that doubled is an incident, not noise
MEDIAN_FINE_RATIO = 1.5  # p50 within 1.5x: "P50 looks fine" (the seed's §5.3 case)
TTFT_RATIO = 1.5  # TTFT p95 up 50 %: users notice slower first tokens well before SLOs break
PREFILL_RATIO = 1.5  # prefill p95 up 50 %: "prefill slow"
TPOT_MEDIAN_RATIO = 1.25  # the *median* token got 25 % slower: the whole distribution moved
LATENCY_MEDIAN_RATIO = 2.0  # TTFT/E2E p50 doubled: everyone is affected, not only the tail
MIN_TAIL_DELTA_S = 0.25  # a p95 change under 250 ms is not what paged anyone

# -- load and capacity ---------------------------------------------------------------------
LOAD_RATIO = 1.2  # request rate (or concurrency) up 20 %: a load change worth naming
CONCURRENCY_RATIO = 1.5  # running requests up 50 %
QUEUED_AVG = 5.0  # requests waiting on average: a standing queue, not a blip
QUEUE_SHARE_CONFIRM = 0.5  # queue time is at least half of mean TTFT: the wait is in the scheduler
QUEUE_SHARE_RULE_OUT = 0.2
KV_FULL_FRAC = 0.9  # vLLM starts preempting near a full KV cache
KV_CALM_FRAC = 0.8
PREEMPTIONS_PER_S = 0.01  # more than one preemption per 100 s
PREFIX_HIT_DROP = 0.2  # prefix-cache hit rate down 20 points: the cache no longer holds the shared prefixes

# -- prefill/decode interference -----------------------------------------------------------
LONG_PROMPT_MULTIPLE = 8.0  # "long" = 8x the baseline median prompt (rounded up to a bucket bound)
LONG_PROMPT_SHARE = 0.002  # at least 0.2 % of requests are long: enough to stall decodes often
STALL_MIN_S = 0.5  # an inter-token gap of 0.5 s+ is a visible stutter ...
STALL_MEDIAN_MULTIPLE = 10.0  # ... and at least 10x the median ITL ...
STALL_WORST_MULTIPLE = 2.0  # ... and twice the baseline's p99.9 (its normal worst gap)
CORR_CONFIRM = 0.5  # minute-level correlation of long-prompt arrivals with ITL stalls
CORR_RULE_OUT = 0.2

# -- release correlation -------------------------------------------------------------------
LOAD_SHIFT_AT_DEPLOY = 0.2  # a request-rate shift of 20 %+ at the same minute muddies a deploy's blame

# -- GPU and host --------------------------------------------------------------------------
GPU_LOW_UTIL_PCT = 50.0  # DCGM_FI_DEV_GPU_UTIL average under 50 % during a training/serving incident
CPU_BUSY_FRAC = 0.8  # host CPUs 80 %+ busy on average ...
BUSIEST_CPU_FRAC = 0.9  # ... or one core pinned at 90 %+ (a CPU-bound DataLoader worker keeps its core)
IOWAIT_FRAC = 0.2  # ... or 20 %+ of CPU time waiting on I/O (data on slow or network storage)
NET_RATIO = 1.5  # network throughput 1.5x the baseline
DATA_WAIT_SHARE = 0.1  # data wait over 10 % of step time (reference §5.3: flag at 5-10 %)
COMM_SHARE = 0.2  # exposed communication over 20 % of step time (seed §4.1: 20-30 %)
LOSS_CV_RATIO = 2.0  # loss variability 2x the baseline's

# -- scoring -------------------------------------------------------------------------------
VERDICT_WEIGHT = {"confirmed": 1.0, "inconclusive": 0.45, "ruled_out": 0.1}
EFFECT_DISCOUNT = 0.5  # a confirmed cause halves the score of the rows it explains
