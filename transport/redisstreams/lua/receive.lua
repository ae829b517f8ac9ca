-- receive: hand out at most ARGV[3] entries of the given partitions to one
-- consumer, atomically: first delayed entries that are due, then entries
-- whose lease expired (XAUTOCLAIM), then new entries (XREADGROUP >).
--
-- KEYS: stream and delay set of each partition (2 keys each), then the
--       namespace's wake stream.
-- ARGV: group, consumer, budget, lease in ms, then per partition a reclaim
--       flag ("1" to run XAUTOCLAIM) and the XAUTOCLAIM cursor.
--
-- Returns {items, cursors, now, next_due, wait_ids} where an item is
-- {partition position (0-based), entry id, fields, delivery count}; cursors
-- are the next XAUTOCLAIM cursors ("" where none ran); now is the server's
-- time in ms; and, only when no item was found, next_due is the earliest
-- due time of a delayed entry ("" for none) and wait_ids the ids to block on
-- with XREAD: each stream's last delivered id, then the wake stream's last.
local group, consumer = ARGV[1], ARGV[2]
local budget = tonumber(ARGV[3])
local lease = ARGV[4]
local n = (#KEYS - 1) / 2
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local items, cursors = {}, {}
for i = 1, n do cursors[i] = '' end

-- Due delayed entries go back to this consumer with the delivery count
-- they would have had (the count when nacked, plus one). The entry never
-- left the stream: only its PEL record was removed by the nack.
for i = 1, n do
  if budget <= 0 then break end
  local s, d = KEYS[2 * i - 1], KEYS[2 * i]
  local due = redis.call('ZRANGEBYSCORE', d, '-inf', now, 'LIMIT', 0, budget)
  for _, m in ipairs(due) do
    redis.call('ZREM', d, m)
    local sp = string.find(m, ' ', 1, true)
    local id, count = string.sub(m, 1, sp - 1), tonumber(string.sub(m, sp + 1)) + 1
    local got = redis.call('XCLAIM', s, group, consumer, 0, id, 'FORCE', 'RETRYCOUNT', count)
    -- An entry deleted meanwhile (by an operator) is skipped.
    if type(got[1]) == 'table' then
      items[#items + 1] = {i - 1, got[1][1], got[1][2], count}
      budget = budget - 1
    end
  end
end

-- Entries whose holder let the lease run out. XAUTOCLAIM raises their
-- delivery count and makes this consumer their owner, which is what fences
-- the late Ack or Nack of the previous holder.
for i = 1, n do
  if budget <= 0 then break end
  if ARGV[3 + 2 * i] == '1' then
    local s = KEYS[2 * i - 1]
    local r = redis.call('XAUTOCLAIM', s, group, consumer, lease, ARGV[4 + 2 * i], 'COUNT', budget)
    cursors[i] = r[1]
    for _, e in ipairs(r[2]) do
      if type(e) == 'table' then
        local p = redis.call('XPENDING', s, group, e[1], e[1], 1)
        items[#items + 1] = {i - 1, e[1], e[2], p[1][4]}
        budget = budget - 1
      end
    end
  end
end

-- New entries.
for i = 1, n do
  if budget <= 0 then break end
  local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', budget, 'STREAMS', KEYS[2 * i - 1], '>')
  if type(r) == 'table' then
    for _, e in ipairs(r[1][2]) do
      items[#items + 1] = {i - 1, e[1], e[2], 1}
      budget = budget - 1
    end
  end
end

if #items > 0 then
  return {items, cursors, now, '', {}}
end

-- Nothing to hand out: say what to wait for.
local next_due, ids = '', {}
for i = 1, n do
  local z = redis.call('ZRANGE', KEYS[2 * i], 0, 0, 'WITHSCORES')
  if #z > 0 and (next_due == '' or tonumber(z[2]) < tonumber(next_due)) then
    next_due = z[2]
  end
  local last = '0-0'
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[2 * i - 1])) do
    local name, id
    for j = 1, #g, 2 do
      if g[j] == 'name' then name = g[j + 1] elseif g[j] == 'last-delivered-id' then id = g[j + 1] end
    end
    if name == group then last = id end
  end
  ids[i] = last
end
local w = redis.call('XREVRANGE', KEYS[#KEYS], '+', '-', 'COUNT', 1)
if #w > 0 then ids[n + 1] = w[1][1] else ids[n + 1] = '0-0' end
return {items, cursors, now, next_due, ids}
