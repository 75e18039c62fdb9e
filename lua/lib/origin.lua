--[[ lib/origin.lua: where the state came from, the layout handshake, the
recovery hold, and a key of the state lost.

Uses lib/common.lua, lib/fields.lua, lib/decisions.lua, lib/shares.lua, lib/capacity.lua.
Defines: load, hold_admissions, why_held, note_ttl, keys_lost, lost, seconds,
server_stamp, status_why, hold_fields.
load() is every call's read of the state, its stamp checked;
hold_admissions() and why_held() serve init.lua and blocked() of
lib/admission.lua, note_ttl(), lost(), seconds() and server_stamp() init.lua,
keys_lost() reclaim() of lib/upkeep.lua, status_why() status_reply() of
lib/admin.lua.

The origin stamp. Every writing call that finds the state stamps it (field
origin) "layout:min_layout:run_id:replid": the layout this library writes
(LAYOUT), the oldest client layout that may use the state (MIN_LAYOUT), and
the Redis server it runs on: its run id (a new one at every start) and its
replication id. The library learns its server's stamp once per load (one
INFO server per server process and library version, never per call), and
load() compares the state's stamp with it: one field of the HMGET it makes
anyway, one string comparison. A stamp of another run id means the state
was written by another server process: it came back (an RDB snapshot or
the append-only file loaded at a restart, a promoted replica, a restore, a
cluster slot migration), and grants made after it was saved may be missing
while their holders run: a loss. The call then, before anything else:
  - gives the state a new epoch (holders' renewals adopt their leases: a
    lease the state lacks gets a new fence, renew.lua),
  - moves the fence above anything that can have been issued (the clock
    floor of a new state: NOW * 1000),
  - holds admissions for the longest lease TTL any client announced
    (ttl_max), capacity at most the resume level,
  - logs 'came-back' with the case and publishes the new epoch (listening
    clients renew at once).
A read-only call (status) reports it in blocked and changes nothing.

The handshake. A stamp whose min_layout is above LAYOUT fails the call
(GOVERNOR_LAYOUT: this client is too old for the state; governor/errors.py
names the upgrade); a stamp of an older layout is served as it is and
stamped anew; a newer one that admits this layout is left as it is. A
state without a stamp was written by a client of layout 3.

The recovery hold (hold_until, hold_reason) is state of its own: set by
init.lua (a loss a client knows of, listeners, the strict mode), by a state
that came back and by a lost key; not_before covers it too (older clients
honour not_before), so a provider's Retry-After never shortens it. configure,
reset and resume keep it (lib/config.lua, resume.lua); resume with the
lift-hold flag ends it, and says so in the log.

A lost key. leases and holders each keep a sentinel (lib/common.lua): either
missing means that key was evicted or deleted while the state stayed.
reclaim() looks (at most once a second) and handles it as a loss: without
the holders' records the leases go too, the held counts are counted again
from what exists (recount), new epoch (the holders' renewals adopt their
leases), the hold. Until reclaim looks (at most RECLAIM_MS), admissions
count what is left.
]]

local SERVER = nil  -- {run = run_id, replid = master_replid, stamp = ...}, learnt once per library load

-- The state's hold and the clients' longest TTL, read without a check (a
-- state of an older layout lacks them): never fails, for any path.
local function hold_fields()
  local raw = redis.call('HMGET', KEY.state, 'hold_until', 'hold_reason', 'ttl_max')
  return tonumber(raw[1]) or 0, raw[2] or '', tonumber(raw[3]) or 0
end

local function info_field(section, name)
  local info = redis.pcall('INFO', section)
  if type(info) ~= 'string' then return '' end
  return string.match(info, name .. ':([%w]+)') or ''
end

-- This server's stamp ('' run id: INFO unavailable, the check is off),
-- and its cluster node id ('' standalone: CLUSTER fails there).
local function learn()
  local run = info_field('server', 'run_id')
  local replid = info_field('replication', 'master_replid')
  local node = redis.pcall('CLUSTER', 'MYID')
  SERVER = {run = run, replid = replid, node = type(node) == 'string' and node or '',
    stamp = string.format('%d:%d:%s:%s', LAYOUT, MIN_LAYOUT, run, replid)}
end

-- Whether cluster node `id` is a primary this node sees alive (CLUSTER
-- NODES: flags master, no fail, link connected): on the rare path only.
local function live_primary(id)
  local nodes = redis.pcall('CLUSTER', 'NODES')
  if type(nodes) ~= 'string' then return false end
  for line in string.gmatch(nodes, '[^\n]+') do
    local node, flags, link = string.match(line, '^(%S+) %S+ (%S+) %S+ %S+ %S+ %S+ (%S+)')
    if node == id then
      return string.find(',' .. flags .. ',', ',master,', 1, true) ~= nil and not string.find(flags, 'fail', 1, true)
        and link == 'connected'
    end
  end
  return false
end

local STAMP = nil  -- this server's stamp, once learnt (read directly by load())
local function server_stamp()
  if not SERVER then learn() end
  STAMP = SERVER.stamp
  return STAMP, SERVER.node  -- (and the cluster node id: init.lua's origin_node)
end

local function seconds(ms)
  return string.format('%.1f s', ms / 1000)
end

-- Hold admissions for `length` ms from now, for `why` (never shortened).
local function hold_admissions(length, why)
  local until_ms = NOW + length
  local current = STATE.hold_until
  if current == nil then current = hold_fields() end
  if until_ms > current then
    set('state', 'hold_until', until_ms)
    set('state', 'hold_reason', why)
  end
  if until_ms > (STATE.not_before or 0) then set('state', 'not_before', until_ms) end
end

-- A client alive now announces its lease TTL: init.lua, renew.lua (its
-- holders are alive), acquire.lua when the client asks (it announces at
-- most once a third of its TTL: the calls between read nothing of it), and
-- grant() of lib/queue.lua for a waiter that waited long. ttl_max is the
-- longest announced in the current period (ttl_cur, since ttl_since) and
-- the one before; a period lasts twice ttl_max, so a TTL counts for at
-- least twice its own length after its last announcement: through the
-- lease of a holder that announced up to a third of its TTL before it was
-- granted (as long as a holder cut off then may believe in its lease),
-- then it decays to what clients still announce. `CALL.ttl_noted` is the
-- longest TTL this call counted already. Its reads never fail (a step
-- after the call's first write).
local function note_ttl(ttl)
  if (CALL.ttl_noted or 0) >= ttl then return end
  CALL.ttl_noted = ttl
  if STATE.ttl_since == nil or STATE.ttl_cur == nil or STATE.ttl_max == nil then
    local raw = redis.call('HMGET', KEY.state, 'ttl_max', 'ttl_cur', 'ttl_since')
    if STATE.ttl_max == nil then STATE.ttl_max = tonumber(raw[1]) or 0 end
    STATE.ttl_cur, STATE.ttl_since = tonumber(raw[2]) or 0, tonumber(raw[3]) or 0
  end
  local before = STATE.ttl_max
  if NOW >= STATE.ttl_since + 2 * before then  -- a new period: the one before it is forgotten
    set('state', 'ttl_max', math.max(STATE.ttl_cur, ttl))
    set('state', 'ttl_cur', ttl)
    set('state', 'ttl_since', NOW)
  else
    if ttl > STATE.ttl_cur then set('state', 'ttl_cur', ttl) end
    if ttl > before then set('state', 'ttl_max', ttl) end
  end
  -- Longer than any client knew: listening clients learn it when the call
  -- finishes (an acquire tells it only when it announces), so that a
  -- client that re-creates a lost state holds long enough (finish()).
  if STATE.ttl_max > before then CALL.ttl_rose = true end
end

-- Why admissions are held (STATE.not_before is after NOW), with the end.
local function why_held()
  local hold_until, reason = hold_fields()
  if hold_until >= STATE.not_before then
    return 'recovery hold: ' .. reason .. ' (ends in ' .. seconds(hold_until - NOW) .. ')'
  end
  return 'holding until the provider\'s retry-after (ends in ' .. seconds(STATE.not_before - NOW) .. ')'
end

-- A loss the state itself shows: new epoch, fences above the clock floor,
-- the hold for the longest TTL recorded, announced. Every key's type and
-- every field is checked first, so nothing is written before a failure.
local function lost(kind, why)
  local ttl_max = select(3, hold_fields())
  if ttl_max == 0 then ttl_max = DEFAULT_TTL_MS end
  local epoch = string.format('%d', NOW) .. '-' .. string.sub(SERVER.run ~= '' and SERVER.run or 'x', 1, 12)
  set('state', 'epoch', epoch)
  local fence = math.max(tonumber(redis.call('HGET', KEY.state, 'fence')) or 0, NOW * 1000)
  redis.call('HSET', KEY.state, 'fence', fence)  -- now: add_lease counts on from the stored fence
  STATE.fence = fence
  hold_admissions(ttl_max, why .. ': holding ' .. ttl_max .. ' ms (the longest lease TTL recorded) for holders to '
    .. 're-register')
  if STATE.capacity > 0 and CONFIG.max_capacity and CONFIG.resume_fraction then
    set('state', 'capacity', math.min(STATE.capacity, resume_level()))
  end
  log(kind, 'until', NOW + ttl_max, 'why', why)
  save()
  redis.call('PUBLISH', CHANNEL, epoch)  -- listening clients renew at once: their leases are adopted
end

-- The case a stamp of another run id is, from this server's replication
-- and persistence (INFO, on this rare path only). A primary's replication
-- id changes at every start, so only a promoted replica is told for sure.
local function which_case(replid)
  if replid ~= '' and replid == info_field('replication', 'master_replid2') then
    return 'came from a replica promoted to primary (grants the old primary made in its last moments may be '
      .. 'missing)'
  end
  if info_field('persistence', 'aof_enabled') == '1' then
    return 'was loaded from the append-only file at a restart, or copied from another server (grants made '
      .. 'after it was written may be missing)'
  end
  return 'was loaded from an RDB snapshot at a restart, or copied from another server (a restore, a cluster '
    .. 'slot migration: grants made after it was saved may be missing)'
end

-- A state stamped otherwise than this server would (raw: its stamp, false
-- when it has none).
local function check_origin(raw)
  if not SERVER then learn() end
  if SERVER.run == '' then return end  -- no INFO (a test double of Redis): no check
  if not raw then  -- a state of layout 3: served as it is, stamped from now on
    if not READ_ONLY then
      set('state', 'origin', SERVER.stamp)
      set('state', 'origin_node', SERVER.node)
    end
    return
  end
  local layout, min_layout, run, replid = string.match(raw, '^(%d+):(%d+):([%w]*):([%w]*)$')
  layout, min_layout = tonumber(layout), tonumber(min_layout)
  if not layout then fail('BADSTATE', 'field origin holds ' .. string.format('%q', raw)) end
  if min_layout > LAYOUT then
    fail('LAYOUT', layout .. ' ' .. min_layout .. ' (this client speaks layout ' .. LAYOUT .. ')')
  end
  local stamp = string.format('%d:%d:%s:%s', math.max(layout, LAYOUT), math.max(min_layout, MIN_LAYOUT),
    SERVER.run, SERVER.replid)
  if run == SERVER.run then
    if layout < LAYOUT and not READ_ONLY then set('state', 'origin', stamp) end  -- older: stamped anew
    return
  end
  local why = 'the state ' .. which_case(replid)
  -- Declared durable (every write on disk before it was acknowledged, no
  -- older copy ever restored) and reloaded from this server's append-only
  -- file, not a promoted replica's: nothing acknowledged is missing.
  -- Moved by a cluster slot migration from a primary alive now (MIGRATE
  -- moves each key whole, and no call runs while the keys are split): intact.
  local promoted = replid ~= '' and replid == info_field('replication', 'master_replid2')
  local from = SERVER.node ~= '' and not promoted and redis.call('HGET', KEY.state, 'origin_node') or ''
  local kept = not promoted and redis.call('HGET', KEY.state, 'durable') == '1'
    and info_field('persistence', 'aof_enabled') == '1'
  if kept then why = 'the state was reloaded from the append-only file at a restart, on a server declared durable' end
  if not kept and from ~= '' and from ~= SERVER.node and live_primary(from) then
    kept = true
    why = 'the state was moved intact by a cluster slot migration from node ' .. from .. ', a primary alive now'
  end
  if READ_ONLY then
    if not kept then CALL.foreign = why .. '; the next writing call handles it as a loss and holds' end
    return
  end
  check_types()
  check_all()
  set('state', 'origin', stamp)
  set('state', 'origin_node', SERVER.node)
  if kept then
    log('came-back', 'why', why .. ': nothing acknowledged is missing, no hold')
    return
  end
  lost('came-back', why)
end

-- The state: `fields`, a list whose first is 'epoch' (it tells whether
-- the state exists), read with its origin stamp in the same HMGET; with
-- `ttls` (a call that announces a lease TTL: note_ttl), the TTLs announced
-- too (a state of an older layout lacks them: read without a check, 0): a
-- command more would cost a call far more than its fields. Nil when the
-- governor does not exist. A stamp other than this server's goes to
-- check_origin (a layout this client may not use fails; a state that came
-- back is handled as a loss), after the fields are read.
local function load(fields, ttls)
  STATE = nil
  fields_of('state')
  local raw, at
  if ttls then
    raw, at = redis.call('HMGET', KEY.state, 'origin', 'ttl_max', 'ttl_cur', 'ttl_since', unpack(fields)), 4
    STATE.ttl_max, STATE.ttl_cur, STATE.ttl_since = tonumber(raw[2]) or 0, tonumber(raw[3]) or 0, tonumber(raw[4]) or 0
  else
    raw, at = redis.call('HMGET', KEY.state, 'origin', unpack(fields)), 1
  end
  if not raw[at + 1] then
    if redis.call('EXISTS', KEY.state) == 0 then
      STATE = nil
      return nil
    end
    local schema = redis.call('HGET', KEY.state, 'schema')
    if schema and tonumber(schema) ~= SCHEMA then fail('SCHEMA', schema .. ' (this client speaks ' .. SCHEMA .. ')') end
  end
  for i = 1, #fields do
    local field, r = fields[i], raw[i + at]
    local seen = r and CHECKED[field]
    STATE[field] = seen and seen[r] or checked(field, r)
  end
  CALL.origin = raw[1]
  if raw[1] ~= (STAMP or server_stamp()) then check_origin(raw[1]) end
  return STATE
end

-- A key of the state gone while the state stayed (evicted, deleted): its
-- sentinel tells (held's only while caps or a reserve are set: recount()
-- writes it). For reclaim() (prepare() done, every key's type checked).
local function keys_lost()
  if STATE.capped == 1 and redis.call('HEXISTS', KEY.held, SENTINEL) == 0 then
    -- held (the caps' counts) gone: counted again from the live leases'
    -- records, exactly (nobody holds what leases does not show): no hold
    recount(false)
    log('repair', 'why', 'key held lost (evicted or deleted): the caps\' counts counted again from the live leases')
  end
  local gone = {}
  if not redis.call('ZSCORE', KEY.leases, SENTINEL) then gone[#gone + 1] = 'leases' end
  if redis.call('HEXISTS', KEY.holders, SENTINEL) == 0 then gone[#gone + 1] = 'holders' end
  if #gone == 0 then return end
  if gone[#gone] == 'holders' then
    -- the leases' records (tenant, class, reservation) are gone: the leases
    -- go too, and their holders re-register within the hold (adoption)
    redis.call('DEL', KEY.leases)
  end
  redis.call('ZADD', KEY.leases, 'NX', 0, SENTINEL)
  redis.call('HSETNX', KEY.holders, SENTINEL, '')
  created(KEY.leases)
  created(KEY.holders)
  recount(false)  -- the held counts from the leases and records that exist
  lost('lost-key', 'key(s) ' .. table.concat(gone, ', ') .. ' lost (evicted or deleted)')
end

-- Why status sees the state unusable as it is ('' none): another server's
-- state, or a lost key.
local function status_why()
  if CALL.foreign then return CALL.foreign end
  local gone = {}
  if not redis.call('ZSCORE', KEY.leases, SENTINEL) then gone[#gone + 1] = 'leases' end
  if redis.call('HEXISTS', KEY.holders, SENTINEL) == 0 then gone[#gone + 1] = 'holders' end
  if #gone > 0 then
    return 'key(s) ' .. table.concat(gone, ', ') .. ' lost (evicted or deleted): the next writing call counts '
      .. 'again and holds'
  end
  return ''
end
