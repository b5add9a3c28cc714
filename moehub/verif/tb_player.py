"""cocotb side of a player run: the clock in C, Python woken once when the player is done."""
import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge


@cocotb.test()
async def play(dut):
    Clock(dut.clk, 10, unit="ns", impl="gpi").start()
    await RisingEdge(dut.done)
