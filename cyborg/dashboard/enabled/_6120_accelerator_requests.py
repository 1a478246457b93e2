# Project > Accelerators > Accelerator Requests.
PANEL = 'accelerator_requests'
PANEL_DASHBOARD = 'project'
PANEL_GROUP = 'accelerators'
ADD_PANEL = ('cyborg.dashboard.project.accelerator_requests.panel.'
             'AcceleratorRequests')
# For the templates under cyborg/dashboard/templates/.
