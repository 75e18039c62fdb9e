--[[ report.lua: one outcome of a provider call; feeds the window and policy.

Uses    lib/admission.lua, lib/policy.lua (after lib/common.lua)
KEYS    the governor's eight keys, see lib/common.lua
ARGV
  ARGV[1] now             int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel         string        where grants to waiters are announced
  ARGV[3] outcome         's' success | 'r' rate-limited | 'e' other error
                          | 'q' quota exhausted (recorded, never a policy input)
  ARGV[4] retry_after_ms  int ms or ''  the provider's Retry-After ('r' only);
                          sets the fleet-wide not_before, capped at ra_cap_ms
  ARGV[5] lease           string or ''  the reporting lease; a lease that is no
                          longer live is fenced off and changes nothing (its
                          news may be stale: the holder stalled past its TTL)
  ARGV[6] fence           int or ''     the fence of the lease the call ran under
                          (also for a lease released before its report)
  ARGV[7] release         '1' | '0'     '1': also release the lease (one call
                          instead of report then release)
Reply
  {1, 'reported'}  recorded (and the lease released if asked)
  {1, 'lost'}      the lease was not live: nothing recorded (any remains of
                   it are removed when a release was asked)
  {1, 'missing'}   no such governor: run init.lua, then call again
]]

local outcome = ARGV[3]
if outcome ~= 's' and outcome ~= 'r' and outcome ~= 'e' and outcome ~= 'q' then
  fail('BADARG', 'outcome must be s, r, e or q, got ' .. tostring(outcome))
end
local retry_after = nil
if ARGV[4] ~= '' then retry_after = arg_int(4, 'retry_after_ms') end
local lease, fence = nil, nil
if ARGV[5] ~= '' then lease = arg_id(5, 'lease') end
if ARGV[6] ~= '' then fence = arg_int(6, 'fence') end
local release = lease ~= nil and ARGV[7] == '1'
check_types()  -- the policy may touch any key after the first write
if not load_state() then return missing_reply() end

-- The provider asked the whole fleet to hold.
local function hold()
  if outcome == 'r' and retry_after then
    local until_ms = NOW + math.min(retry_after, S.ra_cap_ms)
    if until_ms > S.not_before then
      set('not_before', until_ms)
      log('hold', 'until', until_ms, 'why', 'provider retry-after ' .. retry_after .. ' ms')
    end
  end
end

local function give_back()
  if release and redis.call('ZREM', K.leases, lease) == 1 then
    redis.call('HDEL', K.holders, lease)
  end
end

if lease then
  local expiry = tonumber(redis.call('ZSCORE', K.leases, lease))
  if not expiry or expiry <= NOW then
    give_back()
    return finish({SCHEMA, 'lost'})
  end
end

reclaim()
if outcome == 'q' then
  set('quota_count', S.quota_count + 1)
  set('quota_at', NOW)
  log('quota', 'count', S.quota_count, 'why', 'provider reported its quota exhausted (billing, not a throttle)')
else
  record(outcome, fence)
  hold()
end
give_back()
grant()
return finish({SCHEMA, 'reported'})
