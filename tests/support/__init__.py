"""What the tests share: private Redis servers, a loopback proxy, the witness,
worker processes, fault kits, a scripted provider and the reference model."""
