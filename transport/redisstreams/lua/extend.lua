-- extend: renew the leases of deliveries still being worked on, each only
-- if the PEL still records it as the delivery its token names (same
-- consumer, same delivery count). XCLAIM with a min-idle of 0 and JUSTID
-- to the same consumer resets the entry's idle time, which is what
-- XAUTOCLAIM measures the lease by, and does not raise its delivery count.
-- The check and the claim are one atomic step: a delivery whose entry was
-- reclaimed by another consumer is left untouched and reported lost.
--
-- KEYS: the stream of each delivery.
-- ARGV: group, then per delivery its entry id, consumer and delivery count.
--
-- Returns one result per delivery: "ok", "settled" (not pending: settled
-- or nacked before) or "lost <owner> <count>".
local group = ARGV[1]
local out = {}
for i = 1, #KEYS do
  local s = KEYS[i]
  local id, consumer, count = ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1]
  local p = redis.call('XPENDING', s, group, id, id, 1)
  if #p == 0 then
    out[i] = 'settled'
  elseif p[1][2] ~= consumer or tostring(p[1][4]) ~= count then
    out[i] = 'lost ' .. p[1][2] .. ' ' .. tostring(p[1][4])
  else
    redis.call('XCLAIM', s, group, consumer, 0, id, 'JUSTID')
    out[i] = 'ok'
  end
end
return out
