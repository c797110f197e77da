-- wrk script for bench/http_run.py. Environment:
--   ASR_BENCH_MODE      "runs" (POST a wait-mode run) or "bare" (POST ASR_BENCH_BARE_PATH)
--   ASR_BENCH_BARE_PATH the bare mode's path (default /run)
--   ASR_BENCH_INPUT     the run's input (default "hello"; no quotes or backslashes)
--   ASR_BENCH_SESSIONS  file of session ids, one a line (runs mode)
--   ASR_BENCH_KEY       API key (runs mode)
--   ASR_BENCH_THREADS   wrk's -t
--   ASR_BENCH_RUN_MODE  the run's mode: "wait" (default) or "stream" (the whole SSE answer
--                       is read; its frames name the session too)
-- Each thread keeps a FIFO of its sessions: a request takes the oldest, its response puts it
-- back (the run view names its session), so no two requests of a thread share a session
-- (one active run per session) and sessions are used round robin.

local next_tid = 0

function setup(thread)
  thread:set("tid", next_tid)
  next_tid = next_tid + 1
end

local mode = os.getenv("ASR_BENCH_MODE") or "bare"
local queue, head, tail, last = {}, 1, 0, nil
local bare_path = os.getenv("ASR_BENCH_BARE_PATH") or "/run"
local body = '{"input": "' .. (os.getenv("ASR_BENCH_INPUT") or "hello") .. '", "mode": "' ..
  (os.getenv("ASR_BENCH_RUN_MODE") or "wait") .. '"}'

function init(args)
  wrk.headers["Content-Type"] = "application/json"
  if mode ~= "runs" then return end
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("ASR_BENCH_KEY")
  local threads = tonumber(os.getenv("ASR_BENCH_THREADS") or "1")
  local i = 0
  for line in io.lines(os.getenv("ASR_BENCH_SESSIONS")) do
    if i % threads == tid then
      tail = tail + 1
      queue[tail] = line
    end
    i = i + 1
  end
end

function request()
  if mode ~= "runs" then
    return wrk.format("POST", bare_path, nil, body)
  end
  local sid = queue[head]
  if sid ~= nil then
    queue[head] = nil
    head = head + 1
    last = sid
  else
    sid = last -- pool exhausted after errors: the request will be refused, and counted
  end
  return wrk.format("POST", "/v1/sessions/" .. sid .. "/runs", nil, body)
end

function response(status, headers, resp)
  if mode ~= "runs" then return end
  local sid = string.match(resp, '"session_id"%s*:%s*"([^"]+)"')
  if sid ~= nil then
    tail = tail + 1
    queue[tail] = sid
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "errors": %d, "status_errors": %d,' ..
    ' "p50_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99), latency.max))
end
