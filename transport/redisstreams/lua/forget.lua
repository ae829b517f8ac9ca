-- forget: delete consumers of the group that hold no pending entry and
-- were idle longer than ARGV[3] ms (or, with ARGV[4] "self", only the
-- consumer ARGV[2] when it holds nothing). Checked and deleted atomically:
-- XGROUP DELCONSUMER drops the consumer's pending entries, so a consumer
-- that holds any is never deleted.
--
-- KEYS: the partition streams. ARGV: group, this consumer, idle ms, mode.
-- Returns how many consumers were deleted.
local group, me, idle, mode = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local deleted = 0
for i = 1, #KEYS do
  -- A stream or group that does not exist (yet) has no consumers.
  local cs = redis.pcall('XINFO', 'CONSUMERS', KEYS[i], group)
  if type(cs) == 'table' and not cs.err then
    for _, c in ipairs(cs) do
      local f = {}
      for j = 1, #c, 2 do f[c[j]] = c[j + 1] end
      local mine = f['name'] == me
      if f['pending'] == 0 and ((mode == 'self' and mine) or (mode ~= 'self' and not mine and f['idle'] > idle)) then
        redis.call('XGROUP', 'DELCONSUMER', KEYS[i], group, f['name'])
        deleted = deleted + 1
      end
    end
  end
end
return deleted
