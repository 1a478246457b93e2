"""``openstack accelerator`` commands for operators: services, drivers,
host discovery (an OpenStackClient plugin)."""
