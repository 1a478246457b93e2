"""In-process fakes of the services cyborg calls, served over real HTTP."""
