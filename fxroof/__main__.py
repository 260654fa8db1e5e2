from fxroof.cli import entry

entry()
