# The Accelerator Hosts panel of the Admin dashboard.
PANEL = 'accelerator_hosts'
PANEL_DASHBOARD = 'admin'
PANEL_GROUP = 'accelerators'
ADD_PANEL = 'cyborg.dashboard.admin.accelerator_hosts.panel.AcceleratorHosts'
# The app that holds the templates and the stylesheet of the panels.
# Plain CSS in an .scss file: Horizon compiles ADD_SCSS_FILES with its
# SCSS compressor, and CSS is SCSS.
ADD_SCSS_FILES = ['accelerators/accelerators.scss']
