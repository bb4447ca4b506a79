-- Claim a batch id, then add the batch's tallies: atomically, exactly once.
-- KEYS[1]: the batch id's key. KEYS[2..]: one counters hash per metric.
-- ARGV[1]: the batch's digest. ARGV[2]: the batch id's TTL (s).
-- ARGV[3..]: per counters hash, in KEYS order: n, ones, the hash's TTL (s).
-- Returns 1 applied; 0 the id already holds this digest (a re-send: nothing changes);
-- -1 the id holds another digest (a reused id: nothing changes).
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  if redis.call('GET', KEYS[1]) == ARGV[1] then return 0 end
  return -1
end
for i = 2, #KEYS do
  local base = 3 * i - 3
  local n = tonumber(ARGV[base])
  -- Only this script creates counters, and every batch adds n >= 1: the hash is new (and
  -- gets its retention TTL) exactly when its 'n' now equals this batch's n.
  if redis.call('HINCRBY', KEYS[i], 'n', n) == n then
    redis.call('EXPIRE', KEYS[i], ARGV[base + 2])
  end
  redis.call('HINCRBY', KEYS[i], 'ones', ARGV[base + 1])
end
return 1
