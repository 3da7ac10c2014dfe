"""primus_ext.measure"""
