"""Console scripts: nlg-triton (the server), nlg-client (a streaming client), nlg-quickstart."""
