--[[ lib/spending.lua: the spend (usd) budgets' windows, entries and reservations.

Uses lib/common.lua, lib/numbers.lua, lib/fields.lua, lib/decisions.lua, lib/origin.lua.
Defines: spend_budgets, spend_amounts, spend_window, spend_entry, entry_format, entry_spent, spend_prune,
spend_resets, spend_approval, spend_loss, spend_keep, spend_forget.

The spend hash (governor.spend): each budget counts its unit (usd: integer
micro-dollars; requests; tokens) per budget and scope (the fleet, '*', or a tenant) and window, in fields of
the spend key (its entries are dynamic, as held's are):
  b:<budget>:<scope>  "reserved|noted|seen|lost|slot:amount,..."  what the
                      scope spent (settled charges and reservations) per
                      slot of its window; reserved: the part not yet settled;
                      noted: ms the soft threshold was logged (0 none); seen:
                      ms of the entry's last write; lost: ms a loss was
                      counted into it (0 none)
  d:<budget>          "limit|window|soft_ppm|pause|tenant=limit,..."  the
                      budget's definition as its clients last sent it
  a:<budget>:<scope>  "until|add"  an operator's approval: until ms, the limit
                      is raised by add and the threshold does not pause
  r:<id>              "tenant|at|until|budget=amount,..."  a reservation
                      not yet settled, kept until `until` (a lost call's is
                      then kept as spent: its amounts stay in the slots)
  ~                   the server stamp of the last write (lib/origin.lua):
                      another means the hash came back from a snapshot
  ~lost               ms of the last loss found: an entry not written since
                      counts its window as spent in full
  ~prune              ms when expired reservations are looked for next
A window is rolling (n slots of slot_ms: a charge counts for its own slot
and the n after it, so never less than the window's length after it, at
most one slot more) or calendar (one slot, keyed by the
window's start; the client computes the boundaries in the budget's time
zone and passes four of them around its clock: b0 < b1 < b2 < b3).
]]

-- The budgets of a call: ARGV from `first`, 8 per budget (name, limit,
-- tenant limits "t=amount,...", window spec, soft_ppm, pause, window label, unit).
local SPEND_UNITS = {usd = 1, requests = 2, tokens = 3}
local function spend_budgets(first, count)
  local list = {}
  for i = 0, count - 1 do
    local at = first + i * 8
    local name, limit, tenants, spec = ARGV[at], tonumber(ARGV[at + 1]), ARGV[at + 2], ARGV[at + 3]
    local soft, pausing, label = tonumber(ARGV[at + 4]), ARGV[at + 5], ARGV[at + 6]
    if not name or not string.find(name, '^[%w%-_.]+$') or #name > 64 then
      fail('BADARG', 'a spend budget\'s name must be 1-64 characters of [A-Za-z0-9-_.], got ' .. tostring(name))
    end
    if not limit or limit < 0 or limit % 1 ~= 0 or limit > MAX_INT then
      fail('BADARG', 'spend budget ' .. name .. ': limit must be integer micro-dollars, got ' .. tostring(ARGV[at + 1]))
    end
    if not soft or soft < 0 or soft > 1000000 or (pausing ~= '0' and pausing ~= '1') or not label
        or not string.find(label, '^[%w%-_.:/@+]*$') then
      fail('BADARG', 'spend budget ' .. name .. ': soft_ppm in [0, 1e6], pause 0|1 and a window label expected')
    end
    if not tenants or not string.find(tenants, '^[%w%-_.:=,]*$') then
      fail('BADARG', 'spend budget ' .. name .. ': tenant limits must be "tenant=micros,...", got ' .. tostring(tenants))
    end
    local unit = ARGV[at + 7]
    if not SPEND_UNITS[unit] then
      fail('BADARG', 'spend budget ' .. name .. ': unit must be usd, requests or tokens, got ' .. tostring(unit))
    end
    list[#list + 1] = {name = name, limit = limit, tenants = tenants, spec = spec, soft = soft / 1000000,
      pauses = pausing == '1', label = label, unit = unit, slot = SPEND_UNITS[unit]}
  end
  return list
end

-- A budget's window at NOW: {rolling, slot_ms, n, cur (the current slot's
-- key), start (ms), finish (ms: calendar only)}.
local function spend_window(budget)
  local spec = budget.spec or ''
  local slot_ms, n = string.match(spec, '^r:(%d+):(%d+)$')
  if slot_ms then
    slot_ms, n = tonumber(slot_ms), tonumber(n)
    if slot_ms < 1 or n < 1 or n > 1000 then fail('BADARG', 'rolling window ' .. spec .. ': slot_ms >= 1, 1-1000 slots') end
    local cur = math.floor(NOW / slot_ms)
    return {rolling = true, slot_ms = slot_ms, n = n, cur = cur, start = (cur - n) * slot_ms}
  end
  local b = {string.match(spec, '^c:(%d+):(%d+):(%d+):(%d+)$')}
  if #b ~= 4 then fail('BADARG', 'a spend window is "r:<slot_ms>:<slots>" or "c:<b0>:<b1>:<b2>:<b3>", got ' .. spec) end
  for i = 1, 4 do b[i] = tonumber(b[i]) end
  for i = 1, 3 do
    if b[i] <= NOW and NOW < b[i + 1] then return {rolling = false, cur = b[i], start = b[i], finish = b[i + 1]} end
  end
  fail('BADARG', 'calendar window ' .. spec .. ' does not hold the clock (' .. int(NOW) .. ' ms): the client\'s clock '
    .. 'is more than a window away from the server\'s')
end

-- An entry (b:<budget>:<scope>) parsed: {reserved, noted, seen, lost, slots = {{key, amount}, ...}}.
local function spend_entry(raw)
  local entry = {reserved = 0, noted = 0, seen = 0, lost = 0, slots = {}}
  if not raw then return entry end
  local reserved, noted, seen, lost, slots = string.match(raw, '^(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
  if not reserved then return nil end
  entry.reserved, entry.noted, entry.seen, entry.lost = tonumber(reserved), tonumber(noted), tonumber(seen), tonumber(lost)
  for key, amount in string.gmatch(slots, '(%d+):(%d+)') do
    entry.slots[#entry.slots + 1] = {tonumber(key), tonumber(amount)}
  end
  return entry
end

local function entry_format(entry)
  local slots = {}
  for i, slot in ipairs(entry.slots) do slots[i] = int(slot[1]) .. ':' .. int(slot[2]) end
  return int(entry.reserved) .. '|' .. int(entry.noted) .. '|' .. int(NOW) .. '|' .. int(entry.lost) .. '|'
    .. table.concat(slots, ',')
end

local function entry_spent(entry)
  local sum = 0
  for _, slot in ipairs(entry.slots) do sum = sum + slot[2] end
  return sum
end

-- The slots of the window `w` kept, the others dropped (a new window: a
-- lost mark and a noted threshold go with the old one).
local function spend_prune(entry, w)
  local kept = {}
  for _, slot in ipairs(entry.slots) do
    if (w.rolling and slot[1] >= w.cur - w.n) or (not w.rolling and slot[1] == w.cur) then kept[#kept + 1] = slot end
  end
  entry.slots = kept
  if #kept == 0 then entry.lost = 0 end
  if entry.noted < w.start then entry.noted = 0 end
end

-- When `amount` more fits under `limit` (ms): a calendar window's end; a
-- rolling window's, the time its oldest slots leave it; 0: never (the
-- amount is above the whole limit).
local function spend_resets(entry, w, amount, limit)
  if amount > limit then return 0 end
  if not w.rolling then return w.finish end
  local spent = entry_spent(entry)
  table.sort(entry.slots, function(x, y) return x[1] < y[1] end)
  for _, slot in ipairs(entry.slots) do
    spent = spent - slot[2]
    if spent + amount <= limit then return (slot[1] + w.n + 1) * w.slot_ms end
  end
  return (w.cur + 1) * w.slot_ms
end

-- An operator's approval of budget/scope still running: the amount it adds (nil: none).
local function spend_approval(budget, scope)
  local raw = redis.call('HGET', KEY.spend, 'a:' .. budget .. ':' .. scope)
  local until_ms, add = string.match(raw or '', '^(%d+)|(%d+)$')
  if until_ms and tonumber(until_ms) > NOW then return tonumber(add) end
  return nil
end

-- Whether the spend hash may have lost what it counted, and why: it came
-- back from a snapshot (its stamp is another server's), or it is gone
-- while the state says it should hold spending (spend_until), or the
-- state itself starts over under a recovery hold. The time of the loss
-- is kept (~lost): every entry not written since counts its window in full.
local function spend_loss()
  local stamp = server_stamp()
  local raw = redis.call('HMGET', KEY.spend, '~', '~lost')
  local lost_at = tonumber(raw[2]) or 0
  local why = nil
  if raw[1] and raw[1] ~= stamp then
    why = 'the spend came back from a snapshot (written by another server)'
  elseif not raw[1] then
    local spend_until = tonumber(redis.call('HGET', KEY.state, 'spend_until')) or 0
    local hold_until = hold_fields()
    if spend_until > NOW then
      why = 'the spend key was lost while the fleet was spending'
    elseif hold_until > NOW then
      why = 'the state starts over after a loss (a recovery hold runs)'
    end
  end
  if why then
    lost_at = NOW
    redis.call('HSET', KEY.spend, '~lost', int(NOW))
    log('spend-lost', 'why', why .. ': each window open now counts as spent in full until it resets or an operator '
      .. 'approves more (governor spend approve)')
  end
  if raw[1] ~= stamp then redis.call('HSET', KEY.spend, '~', stamp) end
  return lost_at
end

-- The spend key lives until its longest window ends (plus the idle time),
-- and the state remembers until when (spend_until): a spend key gone
-- before then was lost, not expired.
local function spend_keep(until_ms)
  local spend_until = tonumber(redis.call('HGET', KEY.state, 'spend_until')) or 0
  if until_ms > spend_until then set('state', 'spend_until', until_ms) end
  redis.call('PEXPIRE', KEY.spend, int(math.max(until_ms, spend_until) - NOW))
end

-- A call's amounts, "usd" or "usd,requests,tokens" (ARGV[i]): {usd, requests, tokens}.
local function spend_amounts(i, what)
  local v = ARGV[i] or ''
  local a, b, c = string.match(v, '^(%d+),(%d+),(%d+)$')
  if not a then a, b, c = string.match(v, '^(%d+)$'), '0', '0' end
  local list = {tonumber(a), tonumber(b), tonumber(c)}
  if not list[1] or list[1] > MAX_INT or list[2] > MAX_INT or list[3] > MAX_INT then
    fail('BADARG', what .. ' must be "usd" or "usd,requests,tokens" integers in [0, 2^53], got ' .. tostring(v))
  end
  return list
end

-- Expired reservations (calls lost with their lease) are forgotten, at
-- most once a second: their amounts stay spent, the reserved figures drop.
local function spend_forget()
  local due = tonumber(redis.call('HGET', KEY.spend, '~prune')) or 0
  if NOW < due then return end
  redis.call('HSET', KEY.spend, '~prune', int(NOW + 1000))
  local all = redis.call('HGETALL', KEY.spend)
  local dropped = 0
  for i = 1, #all, 2 do
    local tenant, _, until_ms, names = string.match(all[i + 1], '^([^|]*)|(%d+)|(%d+)|(.*)$')
    if string.sub(all[i], 1, 2) == 'r:' and tenant and tonumber(until_ms) <= NOW then
      redis.call('HDEL', KEY.spend, all[i])
      dropped = dropped + 1
      for name, amount in string.gmatch(names, '([^,=]+)=(%d+)') do
        for _, scope in ipairs({'*', tenant}) do
          local field = 'b:' .. name .. ':' .. scope
          local entry = spend_entry(redis.call('HGET', KEY.spend, field))
          if entry and redis.call('HEXISTS', KEY.spend, field) == 1 then
            entry.reserved = math.max(0, entry.reserved - tonumber(amount))
            redis.call('HSET', KEY.spend, field, entry_format(entry))
          end
        end
      end
    end
  end
  if dropped > 0 then
    log('spend-lost-calls', 'count', dropped,
      'why', 'reservations of calls never settled (their leases lost): kept as spent')
  end
end
