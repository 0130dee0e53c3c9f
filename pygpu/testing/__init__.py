"""pygpu.testing: the pytest plugin (plugin.py, loaded through the pytest11
entry point), fault isolation (_isolate.py) and the CUDA driver stand-in
(standin.py, csrc/fake_*.c).  docs/pytest.md is the guide."""
