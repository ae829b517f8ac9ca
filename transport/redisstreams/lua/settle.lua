-- settle: acknowledge or nack deliveries, each only if the PEL still
-- records it as the delivery its token names (same consumer, same delivery
-- count). That check and the change are one atomic step: a delivery whose
-- entry was reclaimed by another consumer (or by this one again) is left
-- untouched and reported lost.
--
-- KEYS: for each delivery its stream and its partition's delay set, then
--       the namespace's wake stream.
-- ARGV: group, delay in ms (negative: ack), then per delivery its entry id,
--       consumer and delivery count.
--
-- Returns one result per delivery: "ok", "settled" (not pending: settled
-- before) or "lost <owner> <count>".
--
-- Ack: XACK and XDEL, so that the stream keeps only unacknowledged, unread
-- and delayed entries and needs no trimming.
-- Nack: XACK, and the entry id with its delivery count goes into the delay
-- set, due at the server's time plus the delay; the receive script claims
-- it back when it is due. The entry stays in the stream meanwhile. A wake
-- entry tells blocked receivers to look again.
local group, delay = ARGV[1], tonumber(ARGV[2])
local n = (#KEYS - 1) / 2
local out = {}
local now
local nacked = false
for i = 1, n do
  local s, d = KEYS[2 * i - 1], KEYS[2 * i]
  local id, consumer, count = ARGV[3 * i], ARGV[3 * i + 1], ARGV[3 * i + 2]
  local p = redis.call('XPENDING', s, group, id, id, 1)
  if #p == 0 then
    out[i] = 'settled'
  elseif p[1][2] ~= consumer or tostring(p[1][4]) ~= count then
    out[i] = 'lost ' .. p[1][2] .. ' ' .. tostring(p[1][4])
  elseif delay < 0 then
    redis.call('XACK', s, group, id)
    redis.call('XDEL', s, id)
    out[i] = 'ok'
  else
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    redis.call('XACK', s, group, id)
    redis.call('ZADD', d, now + delay, id .. ' ' .. count)
    nacked = true
    out[i] = 'ok'
  end
end
if nacked then
  redis.call('XADD', KEYS[#KEYS], 'MAXLEN', '1', '*', 'nack', '1')
end
return out
