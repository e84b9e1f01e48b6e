"""Authentication (TLS, SASL PLAIN / SCRAM), authorization (ACLs) and the values they share."""
