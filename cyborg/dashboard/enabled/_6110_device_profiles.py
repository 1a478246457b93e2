# Project > Accelerators > Device Profiles.
PANEL = 'device_profiles'
PANEL_DASHBOARD = 'project'
PANEL_GROUP = 'accelerators'
ADD_PANEL = 'cyborg.dashboard.project.device_profiles.panel.DeviceProfiles'
# For the templates under cyborg/dashboard/templates/.
