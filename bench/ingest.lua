-- wrk script: POST a batch of reports with a fresh random batch_id each time.
-- Usage: wrk -s bench/ingest.lua URL -- REPORTS_FILE [DELAY_MS] [BEARER_KEY]
--   REPORTS_FILE: the JSON array of reports every batch carries (written by bench/ingest.py).
--   DELAY_MS: pause each connection this long between requests (pacing for the half-load run);
--     a fraction is honoured on average (wrk's delay() takes whole ms: floor or ceil at random).
--   BEARER_KEY: an ingest key, sent as Authorization: Bearer (omit for an open collector).
-- done() prints one JSON line: requests by outcome (202 accepted, 200 duplicate, other) and
-- latency percentiles in microseconds.
local threads = {}
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
  table.insert(threads, thread)
end

local reports, delay_ms
local headers = {["Content-Type"] = "application/json"}
-- Globals, not locals: done() reads them from each thread with thread:get().
accepted, duplicate, other = 0, 0, 0

function init(args)
  local f = assert(io.open(args[1], "r"))
  reports = f:read("*a")
  f:close()
  delay_ms = tonumber(args[2] or "0")
  if args[3] and args[3] ~= "" then headers["Authorization"] = "Bearer " .. args[3] end
  -- Seed from the kernel's random source, mixed with the thread id: ids never repeat across
  -- threads or runs (a repeated id would be answered as a duplicate and counted as such).
  local urandom = io.open("/dev/urandom", "rb")
  local bytes = urandom:read(4)
  urandom:close()
  local seed = id * 7919
  for i = 1, 4 do seed = seed * 256 + bytes:byte(i) end
  math.randomseed(seed)
end

local function batch_id()
  local parts = {}
  for i = 1, 8 do parts[i] = string.format("%04x", math.random(0, 65535)) end
  return table.concat(parts)
end

function request()
  local body = '{"batch_id":"' .. batch_id() .. '","reports":' .. reports .. '}'
  return wrk.format("POST", nil, headers, body)
end

function delay()
  local whole = math.floor(delay_ms)
  if math.random() < delay_ms - whole then return whole + 1 end
  return whole
end

function response(status, headers, body)
  if status == 202 then accepted = accepted + 1
  elseif status == 200 then duplicate = duplicate + 1
  else other = other + 1 end
end

function done(summary, latency, requests)
  local a, d, o = 0, 0, 0
  for _, thread in ipairs(threads) do
    a = a + thread:get("accepted")
    d = d + thread:get("duplicate")
    o = o + thread:get("other")
  end
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"accepted":%d,"duplicate":%d,"other":%d,' ..
    '"socket_errors":%d,"p50_us":%d,"p99_us":%d,"max_us":%d}\n',
    summary.requests, summary.duration, a, d, o,
    summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.timeout, latency:percentile(50), latency:percentile(99), latency.max))
end
