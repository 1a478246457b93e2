"""The URLs of the Accelerator Devices panel."""
from django.urls import re_path

from cyborg.dashboard.admin.accelerator_devices import views

UUID = r'(?P<uuid>[0-9a-fA-F-]{32,36})'

urlpatterns = [
    re_path(r'^$', views.IndexView.as_view(), name='index'),
    re_path(rf'^{UUID}/$', views.DetailView.as_view(), name='detail'),
    re_path(rf'^{UUID}/layout/$', views.LayoutView.as_view(),
            name='layout'),
    re_path(rf'^{UUID}/health/$', views.HealthView.as_view(),
            name='health'),
    re_path(rf'^{UUID}/health/clear/$', views.HealthClearView.as_view(),
            name='health_clear'),
]
