"""primus_ext.recipe"""
