"""CDI (Container Device Interface) specs: the model, the names, and the spec directory."""
