# The Accelerator Capacity panel of the Admin dashboard.
PANEL = 'accelerator_capacity'
PANEL_DASHBOARD = 'admin'
PANEL_GROUP = 'accelerators'
ADD_PANEL = (
    'cyborg.dashboard.admin.accelerator_capacity.panel.AcceleratorCapacity')
