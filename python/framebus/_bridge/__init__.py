"""What is left of the bridge's old private package: ``video`` (the PyAV encoder and decoder of
encoded bridges, used by ``framebus.net.video``, ``framebus echo`` and ``framebus record``). The
bridge itself is ``framebus.net`` and its rooms.
"""
