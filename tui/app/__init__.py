"""The Textual application: screens and thin widgets that draw what the core computes."""
