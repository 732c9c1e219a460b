"""Code that only the site's pages use: page set-up, the reference's example model, the version probe."""
