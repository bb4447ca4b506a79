-- Move one layout-1 hour hash into its month's packed counters string: atomically, once.
-- KEYS[1]: the layout-1 hash {n, ones}. KEYS[2]: the month's counters string.
-- ARGV[1]: the month string's full size in bytes. ARGV[2]: its EXPIREAT (Unix s).
-- ARGV[3]: the BITFIELD index of the hour's n (ones follows it).
-- Returns 1 moved; 0 the hash is gone (moved already); -2 a counter would overflow (nothing
-- changes).
local v = redis.call('HMGET', KEYS[1], 'n', 'ones')
if not v[1] then return 0 end
local n, ones = tonumber(v[1]), tonumber(v[2] or '0')
local index = tonumber(ARGV[3])
if redis.call('EXISTS', KEYS[2]) == 1 then
  local current = redis.call('BITFIELD', KEYS[2], 'GET', 'u32', '#' .. index,
                             'GET', 'u32', '#' .. (index + 1))
  if current[1] + n > 4294967295 or current[2] + ones > 4294967295 then return -2 end
else
  if n > 4294967295 then return -2 end
  redis.call('SETRANGE', KEYS[2], ARGV[1] - 1, '\0')
end
redis.call('BITFIELD', KEYS[2], 'OVERFLOW', 'FAIL', 'INCRBY', 'u32', '#' .. index, n,
           'INCRBY', 'u32', '#' .. (index + 1), ones)
redis.call('EXPIREAT', KEYS[2], ARGV[2])
redis.call('DEL', KEYS[1])
return 1
