"""Stepwise's own settings, the STEPWISE_* values of labeling, scoring, the API and jobs, read
from the environment at start-up (a bad value names its variable); config/settings.py takes
them in whole. Those of the web server and storage stay beside Django's there.
"""
from django.core.exceptions import ImproperlyConfigured

from infra.env import env_bool, env_choice, env_float, env_int, env_list, env_rate, env_shares, env_str
from steps import limits, verification

# Seconds a solution stays leased to an annotator without activity.
STEPWISE_LEASE_SECONDS = env_int("STEPWISE_LEASE_SECONDS", 600, minimum=1)
# Heartbeats one annotator may send per minute (the page sends two, plus one on leaving).
STEPWISE_HEARTBEATS_PER_MINUTE = env_int("STEPWISE_HEARTBEATS_PER_MINUTE", 20, minimum=1)
# Seconds allowed to grade one answer with math-verify before it counts as unknown.
STEPWISE_GRADING_TIMEOUT = env_float("STEPWISE_GRADING_TIMEOUT", 5.0, minimum=0.1)
# Seconds one import may spend grading, all its lines together; the rest are imported ungraded.
STEPWISE_IMPORT_GRADING_BUDGET = env_float("STEPWISE_IMPORT_GRADING_BUDGET", 600.0, minimum=0.0)
STEPWISE_ALLOW_TRUST_REMOTE_CODE = env_bool("STEPWISE_ALLOW_TRUST_REMOTE_CODE", False)
# Wrong API tokens one address may send per 10 minutes before the next are answered 429.
STEPWISE_BAD_TOKEN_LIMIT = env_int("STEPWISE_BAD_TOKEN_LIMIT", 20, minimum=1)
# Hosts a generator or remote scorer URL may name though link-local or a cloud metadata
# service (infra/outbound.py refuses those otherwise), lower-cased as URLs compare them.
STEPWISE_OUTBOUND_ALLOW = [host.lower() for host in env_list("STEPWISE_OUTBOUND_ALLOW")]
# Scoring (scoring/): precision ("auto" = bf16 where supported), tokens per forward batch,
# solutions per Celery chunk, and the queue each rescore rebuilds.
STEPWISE_SCORING_DTYPE = env_choice("STEPWISE_SCORING_DTYPE", "auto", ("auto", "float32", "bfloat16", "float16"))
# 0: chosen by device (wide batches on a GPU, about four solutions on a CPU).
STEPWISE_SCORING_MAX_TOKENS = env_int("STEPWISE_SCORING_MAX_TOKENS", 0, minimum=0)
STEPWISE_RESCORE_CHUNK_SIZE = env_int("STEPWISE_RESCORE_CHUNK_SIZE", 64, minimum=1)
# Solutions with open work in one generation of the queue, restarts included.
STEPWISE_QUEUE_SIZE = env_int("STEPWISE_QUEUE_SIZE", 500, minimum=1)
STEPWISE_QUEUE_PER_PROBLEM = env_int("STEPWISE_QUEUE_PER_PROBLEM", 2, minimum=1)
# Shares of the rebuilt queue, "reason=share,...", parsed into {reason: share} summing to 1
# (the reasons are the scoring app's, checked when it is ready: scoring/rescoring/selection.py).
# The default follows the mission and PRM800K: convincing wrong answers (high PRM score, wrong
# final answer) in front of annotators, with random exploration beside them so the labels keep
# the pool's base rate. docs/active-learning.md: with a frozen SmolLM2-135M head no policy was
# reliably better than random on paired AUC; `random=1` is one setting away.
STEPWISE_SELECTION_SHARES = env_shares("STEPWISE_SELECTION_SHARES", "convincing_wrong=0.5,random=0.5")
# The promotion gate (scoring/learning/promotion.py): a retrained version becomes current only
# when the 95 % paired-bootstrap interval of its gain over the current model on the same
# held-out solutions lies above MIN_GAIN, measured on at least MIN_SOLUTIONS held-out labeled
# solutions with MIN_STEPS labeled steps; fewer ends the run "not enough evidence".
STEPWISE_PROMOTION_MIN_GAIN = env_float("STEPWISE_PROMOTION_MIN_GAIN", 0.0)
STEPWISE_PROMOTION_MIN_SOLUTIONS = env_int("STEPWISE_PROMOTION_MIN_SOLUTIONS", 50, minimum=1)
STEPWISE_PROMOTION_MIN_STEPS = env_int("STEPWISE_PROMOTION_MIN_STEPS", 200, minimum=1)
# Rescore jobs with no chunk done for this long get their missing chunks re-dispatched
# (a worker killed mid-job; Redis redelivers only after its visibility timeout).
STEPWISE_RESCORE_STALL_SECONDS = env_int("STEPWISE_RESCORE_STALL_SECONDS", 900, minimum=1)
# Seconds POST /api/score waits for the ml worker's answer before a 503 (the task's own
# time limit is a little longer, so a late answer is never computed for nobody for long).
STEPWISE_SCORE_API_TIMEOUT = env_float("STEPWISE_SCORE_API_TIMEOUT", 30.0, minimum=0.1)
# Requests of one web process that may wait on the ml worker at once, /api/score and /api/search
# together (each holds a web thread while it waits); one more gets 429, leaving threads for annotators.
STEPWISE_SCORE_CONCURRENCY = env_int("STEPWISE_SCORE_CONCURRENCY", 2, minimum=1)
# Requests of one user (their API token or session) to /api/score and /api/search in flight at
# once, counted in the throttle cache so the bound holds across web processes; one more gets 429.
STEPWISE_SCORE_IN_FLIGHT = env_int("STEPWISE_SCORE_IN_FLIGHT", 2, minimum=1)
# Tokens one POST /api/score may send, counted as the UTF-8 bytes of each problem and step plus one
# per step (its separator): a byte-level tokenizer never makes more tokens than bytes, and math text
# makes about one per 2.8. Past it, 400 naming `items` (or `steps`). 65,536 is 10 s of SmolLM2-135M
# on a 2-core CPU for typical text, 30 s at worst; with a GPU it may be raised.
STEPWISE_SCORE_MAX_TOKENS = env_int("STEPWISE_SCORE_MAX_TOKENS", 65_536, minimum=64)
# POST /api/search (scoring/search/runs.py): how long it waits for the ml worker, the most
# tokens one request may budget, and requests per user (a search holds a worker far longer).
STEPWISE_SEARCH_API_TIMEOUT = env_float("STEPWISE_SEARCH_API_TIMEOUT", 120.0, minimum=0.1)
STEPWISE_SEARCH_MAX_TOKENS = env_int("STEPWISE_SEARCH_MAX_TOKENS", 8192, minimum=1)
STEPWISE_SEARCH_RATE = env_rate("STEPWISE_SEARCH_RATE", "20/minute")
# Loaded PRMs a worker keeps, by weight fingerprint (head-only versions share one backbone).
STEPWISE_MODEL_CACHE_SIZE = env_int("STEPWISE_MODEL_CACHE_SIZE", 2, minimum=1)
# Bounded input: JSON nesting (request bodies and import lines), the bytes of an import line,
# and a solution's steps and the characters of each step (steps/limits.py: imports and
# /api/score alike; longer ones are refused naming the line and field).
STEPWISE_MAX_JSON_DEPTH = env_int("STEPWISE_MAX_JSON_DEPTH", 64, minimum=2)
STEPWISE_IMPORT_MAX_LINE_BYTES = env_int("STEPWISE_IMPORT_MAX_LINE_BYTES", 1024 * 1024, minimum=1024)
STEPWISE_IMPORT_MAX_STEPS = env_int("STEPWISE_IMPORT_MAX_STEPS", limits.MAX_STEPS, minimum=1)
STEPWISE_IMPORT_MAX_STEP_CHARS = env_int("STEPWISE_IMPORT_MAX_STEP_CHARS", limits.MAX_STEP_CHARS, minimum=100)
# Requests per user to POST /api/score (DRF throttle; counted in Redis when REDIS_URL is set).
STEPWISE_SCORE_RATE = env_rate("STEPWISE_SCORE_RATE", "120/minute")
# Days uploaded import files and their reports are kept once their job has finished (0: forever).
STEPWISE_RETENTION_DAYS = env_int("STEPWISE_RETENTION_DAYS", 30, minimum=0)
# Job recovery (jobs/recovery.py): a worker beats each job it holds every HEARTBEAT
# seconds; a running job silent for STALE seconds has lost its worker; a pending job whose
# message was sent REQUEUE seconds ago gets it again (the broker may have lost it).
STEPWISE_JOB_HEARTBEAT_SECONDS = env_float("STEPWISE_JOB_HEARTBEAT_SECONDS", 5.0, minimum=0.1)
STEPWISE_JOB_STALE_SECONDS = env_float("STEPWISE_JOB_STALE_SECONDS", 30.0, minimum=1.0)
STEPWISE_JOB_REQUEUE_SECONDS = env_float("STEPWISE_JOB_REQUEUE_SECONDS", 120.0, minimum=0.0)
if STEPWISE_JOB_STALE_SECONDS <= 2 * STEPWISE_JOB_HEARTBEAT_SECONDS:
    raise ImproperlyConfigured("STEPWISE_JOB_STALE_SECONDS must exceed twice STEPWISE_JOB_HEARTBEAT_SECONDS")
# The prompt a judge is asked about each solution (steps/verification.py): {problem} and {steps}
# (numbered "Step N: ...") are filled in; empty: the built-in ThinkPRM-style template.
STEPWISE_JUDGE_PROMPT = env_str("STEPWISE_JUDGE_PROMPT", "")
if STEPWISE_JUDGE_PROMPT:
    try:
        verification.check_template(STEPWISE_JUDGE_PROMPT)
    except ValueError as error:
        raise ImproperlyConfigured(f"STEPWISE_JUDGE_PROMPT: {error}") from None
