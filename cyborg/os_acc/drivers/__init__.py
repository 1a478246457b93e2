"""os-acc's device-half drivers (namespace ``cyborg.os_acc.driver``)."""
