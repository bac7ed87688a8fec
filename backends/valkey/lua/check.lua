#!lua flags=no-writes
-- check: name the commands of the Store, run inside its scripts or sent
-- by it, that the user may not run, without running any of them
-- (redis.acl_check_cmd asks the user's ACL rules).
--
-- KEYS[1]  the record of a key that no lease uses
--
-- Returns the names of the refused commands among HSET, PERSIST and
-- PEXPIRE, which acquire.lua, release.lua and forcerelease.lua run on the
-- records, and DEL, SCAN and ROLE, which Store.Sweep needs.
local refused = {}
local cmds = {
  {'HSET', KEYS[1], 'expires', '0'},
  {'PERSIST', KEYS[1]},
  {'PEXPIRE', KEYS[1], '1'},
  {'DEL', KEYS[1]},
  {'SCAN', '0'},
  {'ROLE'},
}
for _, cmd in ipairs(cmds) do
  if not redis.acl_check_cmd(unpack(cmd)) then
    table.insert(refused, cmd[1])
  end
end
return refused
