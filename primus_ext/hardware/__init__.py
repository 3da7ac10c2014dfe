"""primus_ext.hardware"""
