-- pending: count the namespace's messages in one atomic snapshot.
--
-- KEYS: the partition streams. ARGV: group.
--
-- Returns {ready, unacked}. A stream holds only entries not yet
-- acknowledged (acknowledged ones are deleted), so its length less its
-- pending entries is what waits for a consumer: unread entries and
-- delayed ones.
local ready, unacked = 0, 0
for i = 1, #KEYS do
  local len = redis.call('XLEN', KEYS[i])
  local pending = 0
  if len > 0 then
    pending = tonumber(redis.call('XPENDING', KEYS[i], ARGV[1])[1])
  end
  if len > pending then ready = ready + len - pending end
  unacked = unacked + pending
end
return {ready, unacked}
