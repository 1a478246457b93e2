# The Accelerator Devices panel of the Admin dashboard.
PANEL = 'accelerator_devices'
PANEL_DASHBOARD = 'admin'
PANEL_GROUP = 'accelerators'
ADD_PANEL = (
    'cyborg.dashboard.admin.accelerator_devices.panel.AcceleratorDevices')
