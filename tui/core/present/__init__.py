"""What a person sees, computed without a UI: panels, axes, chart data, the
view model and header, overlays, the report and its SVG charts, the Prometheus gauges.
"""
