-- Gantry's job_submit.lua (Slurm's job_submit/lua plugin): every new job of a Gantry-managed
-- partition is held, so that Gantry, not Slurm, decides where and when it starts. Gantry then
-- pins the job's nodes (scontrol update JobId=.. ReqNodeList=.. NumNodes=..) and releases it.
-- Users change nothing: they submit with plain sbatch -p <partition>.
--
-- Install: copy next to slurm.conf (Slurm looks for job_submit.lua in slurm.conf's directory)
-- and set JobSubmitPlugins=lua. The managed partitions are the comma-separated list in the
-- environment variable GANTRY_MANAGED_PARTITIONS of slurmctld, or `default_partitions` below.
-- Remove the plugin (or the partition from the list) to give the jobs back to Slurm's own
-- scheduler. See docs/slurm.md.
--
-- Fail-open: with GANTRY_HEARTBEAT_FILE set (in slurmctld's environment, or
-- `default_heartbeat_file` below), new jobs are no longer held once gantryd's heartbeat in that
-- file ("TIME AFTER": the Unix time of its last cycle, and the silence in seconds it allows; 0
-- turns fail-open off) is more than AFTER seconds old: Slurm then schedules them itself. No
-- file means fail-open is off. `gantry failopen` releases the jobs already held.

local default_partitions = "gantry"
local managed = os.getenv("GANTRY_MANAGED_PARTITIONS") or default_partitions
local default_heartbeat_file = nil
local heartbeat_file = os.getenv("GANTRY_HEARTBEAT_FILE") or default_heartbeat_file

-- Seconds gantryd has been silent beyond its limit, or nil while it is alive (or fail-open is
-- off). Read at every submission: a small local file, so slurmctld does not wait on it.
local function gantry_silent_for()
   if heartbeat_file == nil or heartbeat_file == "" then return nil end
   local f = io.open(heartbeat_file, "r")
   if f == nil then return nil end
   local beat, after = f:read("*n", "*n")
   f:close()
   if beat == nil or after == nil or after <= 0 then return nil end
   local silent = os.time() - beat
   if silent > after then return silent end
   return nil
end

-- True when the comma-separated partition list `parts` names a managed partition.
local function is_managed(parts)
   if parts == nil then return false end
   for p in string.gmatch(parts, "[^,]+") do
      if string.find("," .. managed .. ",", "," .. p .. ",", 1, true) then return true end
   end
   return false
end

-- The partition a job without -p lands in: the default one among those the user may use.
local function default_partition(part_list)
   for _, part in pairs(part_list) do
      if part.flag_default == 1 then return part.name end
   end
   return nil
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local parts = job_desc.partition or default_partition(part_list)
   if is_managed(parts) then
      local silent = gantry_silent_for()
      if silent ~= nil then
         slurm.log_info("gantry: fail-open, gantryd silent for %d s: job %s of uid %u left to Slurm",
                        silent, tostring(job_desc.name), submit_uid)
         return slurm.SUCCESS
      end
      -- Priority 0 is a hold (Slurm 22.05 shows it as JobHeldUser; see slurm_job_modify).
      job_desc.priority = 0
      slurm.log_info("gantry: holding new job %s of uid %u for Gantry",
                     tostring(job_desc.name), submit_uid)
   end
   return slurm.SUCCESS
end

-- A hold set here counts as the user's own, so its owner could release it and bypass Gantry.
-- Only root (Gantry runs as root or SlurmUser) may change a job of a managed partition; users
-- may still cancel their jobs (scancel is not a modify).
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   if is_managed(job_rec.partition) and modify_uid ~= 0 then
      slurm.log_user("jobs in Gantry-managed partitions are started by Gantry")
      return slurm.ESLURM_ACCESS_DENIED
   end
   return slurm.SUCCESS
end

slurm.log_info("gantry job_submit.lua loaded; managed partitions: %s; heartbeat: %s", managed,
               tostring(heartbeat_file))
return slurm.SUCCESS
