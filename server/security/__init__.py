"""Authentication on the broker's listeners: TLS, SASL and the principals they yield."""
