-- Apply one validated batch atomically, exactly once.
-- KEYS: for each metric i, KEYS[2i-1] = its batch (idempotency) key, KEYS[2i] = its counters.
-- ARGV: [1] batch digest, [2] batch-id TTL (s), [3..] per metric: n, ones, counter TTL (s).
-- Returns 1 applied, 0 already applied (duplicate), -1 the batch id holds another digest.
local digest = ARGV[1]
local metrics = #KEYS / 2
local seen = 0
for i = 1, metrics do
  local stored = redis.call('GET', KEYS[2 * i - 1])
  if stored then
    if stored ~= digest then return -1 end
    seen = seen + 1
  end
end
if seen == metrics then return 0 end
for i = 1, metrics do
  if redis.call('SET', KEYS[2 * i - 1], digest, 'NX', 'EX', ARGV[2]) then
    local counters = KEYS[2 * i]
    local base = 3 * i
    redis.call('HINCRBY', counters, 'n', ARGV[base])
    redis.call('HINCRBY', counters, 'ones', ARGV[base + 1])
    if redis.call('TTL', counters) < 0 then
      redis.call('EXPIRE', counters, ARGV[base + 2])
    end
  end
end
return 1
