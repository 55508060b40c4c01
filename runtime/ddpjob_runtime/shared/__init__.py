"""The torch-free layer the client and every host import: contract names, storage, layouts."""
