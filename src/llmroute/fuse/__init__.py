"""Result fuse (layer 3): is the answer going bad or the engine failing?"""
