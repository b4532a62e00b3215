"""Developer and test tools. Nothing here is a product default: the server never imports
this package, and no setting points at it unless a developer types the URL."""
