"""os-acc's instance plugins (namespace ``cyborg.os_acc.plugin``)."""
