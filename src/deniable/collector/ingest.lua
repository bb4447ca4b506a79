-- Claim a batch id, then add the batch's tallies to packed month counters: atomically,
-- exactly once, all or nothing.
-- KEYS[1]: the batch id's claim: a STRING, or with ARGV[3] a HASH holding claims as fields.
-- KEYS[2..]: month counters strings (distinct).
-- ARGV[1]: the claim's value (a keyed HMAC of the batch's content, or "1").
-- ARGV[2]: the claim's EXPIREAT (Unix s, on an hour boundary; for a HASH, the whole hash's).
-- ARGV[3]: "" (KEYS[1] is a STRING), or the claim's field in the HASH KEYS[1].
-- ARGV[4..]: per counters string, in KEYS order: its full size in bytes, its EXPIREAT, the
--   number m of increments, then m pairs (BITFIELD index, increment >= 0).
-- Returns 1 applied; 0 the id already holds this value (a re-send: nothing changes);
-- -1 the id holds another value (a reused id: nothing changes); -2 an increment would
-- overflow a 32-bit counter (nothing changes).
local field = ARGV[3]
local claimed
if field == '' then claimed = redis.call('GET', KEYS[1])
else claimed = redis.call('HGET', KEYS[1], field) end
if claimed then
  if claimed == ARGV[1] then return 0 end
  return -1
end
local MAX = 4294967295
local CHUNK = 512  -- BITFIELD operations per call (keeps unpack within Lua's stack)

local function bitfield(key, head, ops, width)
  local replies, r = {}, 0
  local step = CHUNK * width
  for first = 1, #ops, step do
    local args, c = {}, 0
    for _, v in ipairs(head) do c = c + 1; args[c] = v end
    for j = first, math.min(#ops, first + step - 1) do c = c + 1; args[c] = ops[j] end
    for _, v in ipairs(redis.call('BITFIELD', key, unpack(args))) do r = r + 1; replies[r] = v end
  end
  return replies
end

-- Read every counter to change before writing anything: a failed batch leaves Redis unchanged.
local a = 4
local plan = {}
for i = 2, #KEYS do
  local size, expire_at, m = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  local exists = redis.call('EXISTS', KEYS[i]) == 1
  local gets, incrs, bys, g, c, b = {}, {}, {}, 0, 0, 0
  for p = 0, m - 1 do
    local by = tonumber(ARGV[a + 4 + 2 * p])
    if by > MAX then return -2 end  -- (a new month's counters are all 0)
    if by > 0 then
      local field = '#' .. ARGV[a + 3 + 2 * p]
      if exists then
        b = b + 1; bys[b] = by
        gets[g + 1] = 'GET'; gets[g + 2] = 'u32'; gets[g + 3] = field; g = g + 3
      end
      incrs[c + 1] = 'INCRBY'; incrs[c + 2] = 'u32'; incrs[c + 3] = field; incrs[c + 4] = by
      c = c + 4
    end
  end
  if b > 0 then
    local current = bitfield(KEYS[i], {}, gets, 3)
    for j = 1, b do
      if current[j] + bys[j] > MAX then return -2 end
    end
  end
  plan[i] = {size, expire_at, incrs}
  a = a + 3 + 2 * m
end
if field == '' then redis.call('SET', KEYS[1], ARGV[1], 'EXAT', ARGV[2])
else
  redis.call('HSET', KEYS[1], field, ARGV[1])
  redis.call('EXPIREAT', KEYS[1], ARGV[2])
end
for i = 2, #KEYS do
  local size, expire_at, incrs = plan[i][1], plan[i][2], plan[i][3]
  if redis.call('EXISTS', KEYS[i]) == 0 then
    -- Created at its month's full size: its length never tells when it was written.
    redis.call('SETRANGE', KEYS[i], size - 1, '\0')
  end
  if #incrs > 0 then
    for _, r in ipairs(bitfield(KEYS[i], {'OVERFLOW', 'FAIL'}, incrs, 4)) do
      if not r then return redis.error_reply('ERR counter overflow after the check') end
    end
  end
  redis.call('EXPIREAT', KEYS[i], expire_at)
end
return 1
