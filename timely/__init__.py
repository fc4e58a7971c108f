"""pytimely: timely dataflow for Python."""
__version__ = "0.1.0"
