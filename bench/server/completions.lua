-- completions.lua: wrk script for bench/server/run.sh. Every request POSTs
-- the same non-streaming /v1/completions body (BENCH_BODY_FILE, else a
-- built-in one). wrk counts a request whatever its status, so each thread
-- counts its 2xx answers and the others, and done() prints one JSON line
-- with the counts and the latency percentiles (microseconds), so errors
-- cannot pass for throughput.

local default_body = '{"prompt": "def fibonacci(n):\\n", "max_tokens": 32, "temperature": 0}'

local function read_body()
   local path = os.getenv("BENCH_BODY_FILE")
   if path and path ~= "" then
      local f = assert(io.open(path, "rb"))
      local b = f:read("*a")
      f:close()
      return b
   end
   return default_body
end

wrk.method = "POST"
wrk.body = read_body()
wrk.headers["Content-Type"] = "application/json"

local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

-- per thread (each has its own Lua state)
ok = 0
bad = 0
function response(status, headers, body)
   if status >= 200 and status < 300 and body:find('"text_completion"', 1, true) then
      ok = ok + 1
   else
      bad = bad + 1
      if bad <= 3 then io.stderr:write("non-2xx or bad answer: " .. status .. " " .. body:sub(1, 200) .. "\n") end
   end
end

function done(summary, latency, requests)
   local ok_n, bad_n = 0, 0
   for _, t in ipairs(threads) do
      ok_n = ok_n + t:get("ok")
      bad_n = bad_n + t:get("bad")
   end
   local secs = summary.duration / 1e6
   local e = summary.errors
   io.write(string.format(
      '{"seconds": %.3f, "requests": %d, "ok": %d, "bad": %d, "ok_per_s": %.2f, ' ..
      '"all_per_s": %.2f, "socket_errors": {"connect": %d, "read": %d, "write": %d, ' ..
      '"timeout": %d}, "status_errors": %d, "latency_us": {"mean": %.1f, "p50": %d, ' ..
      '"p90": %d, "p99": %d, "max": %d}}\n',
      secs, summary.requests, ok_n, bad_n, ok_n / secs, summary.requests / secs,
      e.connect, e.read, e.write, e.timeout, e.status, latency.mean,
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
